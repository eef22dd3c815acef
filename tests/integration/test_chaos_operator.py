"""The CI share of the chaos suite on the real control plane (chaos/; `make chaos` runs 20 operator kills and more).

The operator (its own process) SIGKILLed once during each phase: the seed reconcile, a source-change rollout and a
deletion; and mid-preload, a target node deleted, a node NotReady (then back), a preload pod evicted. Each run must
converge with no duplicate Jobs or DaemonSets and no node label or finalizer leaks. With two replicas (kopf peering),
the active one is SIGKILLed during a warm-up and the other takes over (chaos/chaos_peering.py; `make chaos` warms 500
nodes, this share 100). test_chaos_controlplane.py restarts kube-apiserver and etcd.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kubernetes import client

import chaos_cluster
import chaos_nodes
import chaos_operator
import chaos_peering
import kube
from chaos_report import failures
from nodepool import NodePool
from warmstart.api import nodelabels
from warmstart.render import jobs, labels

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


@pytest.mark.parametrize("phase", chaos_operator.PHASES)
def test_operator_sigkill_converges_without_leaks(
    cluster: Any, api_client: client.ApiClient, tmp_path: pathlib.Path, phase: str
) -> None:
    run = chaos_operator.one_run(api_client, pathlib.Path(cluster.kubeconfig), tmp_path, phase, seed=7)
    assert run.ok, "\n".join(failures([run]) + [p.read_text()[-3000:] for p in tmp_path.glob("operator-*.log")])


@pytest.mark.parametrize("fault", chaos_nodes.FAULTS)
def test_a_node_fault_mid_preload_converges_without_leaks(
    cluster: Any, api_client: client.ApiClient, tmp_path: pathlib.Path, fault: str
) -> None:
    """A target node deleted (the cache is Ready on the others, no Job left for it), a node NotReady then back, or
    a preload pod evicted, while the preload Jobs run."""
    run = chaos_nodes.one_run(api_client, pathlib.Path(cluster.kubeconfig), tmp_path, fault, seed=7)
    assert run.ok, "\n".join(failures([run]) + [p.read_text()[-3000:] for p in tmp_path.glob("operator-*.log")])


#: the CI share's warm-up: large enough for several throttled waves (limit 25 of 100), small enough for a few minutes
PEERING_NODES = 100


def test_the_standby_replica_takes_over_a_warm_up_when_the_active_one_is_killed(
    cluster: Any, api_client: client.ApiClient, tmp_path: pathlib.Path
) -> None:
    """Two replicas; SIGKILL the active one once a quarter of the nodes are Ready: the standby resumes and finishes,
    with never two active Jobs for one node and every node labelled ready. The takeover time is printed, not
    asserted."""
    run, takeover = chaos_peering.one_run(api_client, pathlib.Path(cluster.kubeconfig), tmp_path, PEERING_NODES, 7)
    print(run.note)
    assert takeover is not None and takeover.resumed_s is not None, run.violations
    assert run.ok, "\n".join(failures([run]) + [p.read_text()[-3000:] for p in tmp_path.glob("operator-*.log")])


def test_the_invariant_checks_see_planted_leaks(cluster: Any, api_client: client.ApiClient, namespace: str) -> None:
    """The checks the chaos runs rely on can fail: a label with no cache behind it, two active Jobs for one node."""
    pool = NodePool(api_client, prefix="leak")
    try:
        _, (node,) = pool.add(1)
        label = nodelabels.weights_ready_label("0123456789ab")
        client.CoreV1Api(api_client).patch_node(node, {"metadata": {"labels": {label: nodelabels.READY}}})
        assert chaos_cluster.label_leaks(api_client, namespace, [node]) == [f"{node}: {label}"]
        job_labels = {labels.ROLE_LABEL: jobs.ROLE_PRELOAD, labels.MDCC_LABEL: "weights-x", labels.NODE_LABEL: node}
        for index in range(2):
            client.BatchV1Api(api_client).create_namespaced_job(
                namespace,
                {
                    "metadata": {"name": f"planted-{index}", "labels": job_labels},
                    "spec": {
                        "template": {
                            "metadata": {"annotations": {"sim.warmstart.io/duration": "600s"}},  # stays active
                            "spec": {
                                "restartPolicy": "Never",
                                "nodeName": node,
                                "containers": [{"name": "c", "image": "busybox:1"}],
                            },
                        }
                    },
                },
            )
        assert chaos_cluster.duplicate_jobs(api_client, namespace) == [f"2 active preload Jobs for weights-x on {node}"]
    finally:
        pool.delete_all()
