"""A real local Kubernetes control plane, built from Go modules, with kwok-simulated GPU nodes and, on request,
real kubelet nodes.

Use :func:`warmstart.localcluster.building.ensure_binaries` for the binaries,
:func:`warmstart.localcluster.running.up` / ``down`` / ``status`` for a cluster (``real_nodes=N`` adds real
nodes, see :mod:`warmstart.localcluster.realnodes`), and :mod:`warmstart.localcluster.nodes` to add or remove
fake nodes. See docs/localcluster.md.
"""
