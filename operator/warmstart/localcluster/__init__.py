"""A real local Kubernetes control plane, built from Go modules, with kwok-simulated GPU nodes.

Use :func:`warmstart.localcluster.building.ensure_binaries` for the binaries,
:func:`warmstart.localcluster.running.up` / ``down`` / ``status`` for a cluster, and
:mod:`warmstart.localcluster.nodes` to add or remove fake nodes. See docs/localcluster.md.
"""
