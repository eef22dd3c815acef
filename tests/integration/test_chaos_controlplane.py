"""The CI share of the chaos suite's control-plane scenario (chaos/chaos_controlplane.py; `make chaos` repeats it).

kube-apiserver, then etcd, is SIGKILLed and restarted (same binary, flags, ports and data) while the operator, in its
own process, reconciles a new endpoint and a router follows an EndpointSlice and its ConfigMap. After the restart the
operator must finish the reconcile and act on a scale made after it, the router must see changes made after it, and
nothing may be duplicated or leaked. Each run has a cluster of its own, so the restart disturbs no other test.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import config

import chaos_controlplane
import kube
from chaos_report import failures
from warmstart.localcluster import running

pytestmark = pytest.mark.cluster


@pytest.fixture
def own_cluster(tmp_path: pathlib.Path) -> Iterator[running.Cluster]:
    """A cluster of this test's own (its kube-apiserver and etcd are the ones killed)."""
    directory = tmp_path / "cluster"
    started = running.up(directory)
    try:
        kube.install_crds(str(started.kubeconfig))
        yield started
    finally:
        running.down(directory)


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_control_plane_restart_mid_reconcile_converges_and_watches_resume(
    own_cluster: running.Cluster, tmp_path: pathlib.Path, component: str
) -> None:
    api: Any = config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    try:
        run = chaos_controlplane.one_run(api, own_cluster.dir, tmp_path, component, seed=7)
    finally:
        api.close()
    logs = [p.read_text()[-3000:] for p in sorted(tmp_path.glob("*.log"))]
    assert run.ok, "\n".join(failures([run]) + logs)
