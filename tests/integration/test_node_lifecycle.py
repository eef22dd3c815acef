"""Nodes that come and go, on the real control plane with kwok nodes: cordoned, NotReady, unreachable and
NoExecute-tainted nodes leave a weights cache's targets (never holding it back), lose their preload Jobs, and are
warmed again when they return; a replaced node (deleted, and a new one of the same type joins) is warmed on its own.

The node-lifecycle and taint-eviction controllers run as in a real cluster: a node reported NotReady or unreachable
gets their taints. kwok keeps a node Ready only while it carries kwok's annotation, so the tests take it away to let
a node fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import fleet
import kube
import operating
from nodepool import NodePool
from warmstart.localcluster import nodes as kwok_nodes

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def test_a_cordoned_node_gets_no_job_and_does_not_hold_the_cache_until_uncordoned(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    core = client.CoreV1Api(api_client)
    instance_type, targets = own_nodes.add(3)
    cordoned = targets[0]
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render()):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        status = fleet.wait_status(api_client, namespace, name, "ready without it", state="Ready", targetNodes=2)
        assert fleet.unavailable(status) == {cordoned: "Cordoned"} and status["readyNodes"] == 2
        assert cordoned not in fleet.job_nodes(api_client, namespace)
        assert cordoned not in fleet.labeled(api_client, name)
        for job in fleet.preload_jobs(api_client, namespace):
            keys = {t.key for t in job.spec.template.spec.tolerations or []}
            assert not keys & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", None}

        core.patch_node(cordoned, {"spec": {"unschedulable": False}})
        status = fleet.wait_status(api_client, namespace, name, "back", state="Ready", targetNodes=3, readyNodes=3)
        assert "unavailableNodes" not in status
        assert fleet.labeled(api_client, name) == set(targets)
        fleet.delete_all(api_client, namespace)


@pytest.mark.parametrize(("condition", "reason"), [("False", "NotReady"), ("Unknown", "Unreachable")])
def test_a_node_that_fails_mid_download_loses_its_job_never_holds_the_gate_and_is_warmed_when_back(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool, condition: str, reason: str
) -> None:
    instance_type, targets = own_nodes.add(3)
    failing = targets[0]
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render(duration="12s")):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        kube.wait_for(lambda: fleet.job_nodes(api_client, namespace) == sorted(targets), fleet.TIMEOUT, what="Jobs")
        fleet.set_ready(api_client, failing, condition)
        status = fleet.wait_status(api_client, namespace, name, "ready on the others", state="Ready", targetNodes=2)
        assert fleet.unavailable(status)[failing] in (reason, "Unreachable")  # NotReady turns Unreachable later
        assert status["readyNodes"] == 2 and failing not in {n["node"] for n in status["nodes"]}
        assert failing not in fleet.job_nodes(api_client, namespace)
        assert fleet.labeled(api_client, name) == set(targets[1:])

        fleet.give_back(api_client, failing)
        fleet.wait_status(api_client, namespace, name, "warming it", targetNodes=3, readyNodes=2)
        assert failing in fleet.job_nodes(api_client, namespace)
        fleet.wait_status(api_client, namespace, name, "ready again", state="Ready", targetNodes=3, readyNodes=3)
        assert fleet.labeled(api_client, name) == set(targets)
        fleet.delete_all(api_client, namespace)


def test_a_no_execute_taint_takes_the_node_out_until_it_is_removed(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    core = client.CoreV1Api(api_client)
    instance_type, targets = own_nodes.add(2)
    tainted = targets[0]
    taint = {"key": "example.com/maintenance", "value": "true", "effect": "NoExecute"}
    core.patch_node(tainted, {"spec": {"taints": [taint]}})
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render()):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        status = fleet.wait_status(api_client, namespace, name, "ready", state="Ready", targetNodes=1, readyNodes=1)
        assert fleet.unavailable(status) == {tainted: "NoExecuteTaint"}
        assert fleet.job_nodes(api_client, namespace) == [targets[1]]

        core.patch_node(tainted, {"spec": {"taints": None}})
        fleet.wait_status(api_client, namespace, name, "ready on both", state="Ready", targetNodes=2, readyNodes=2)
        fleet.delete_all(api_client, namespace)


def test_a_replaced_node_is_warmed_automatically_and_the_status_shows_it(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(3)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render(duration="6s")):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        fleet.wait_status(api_client, namespace, name, "ready", state="Ready", targetNodes=3, readyNodes=3)
        interrupted = targets[1]
        kwok_nodes.delete_node(api_client, interrupted)
        fleet.wait_status(api_client, namespace, name, "two left", state="Ready", targetNodes=2, readyNodes=2)

        _, (replacement,) = own_nodes.add(1, start=3, instance_type=instance_type)
        warming = fleet.wait_status(api_client, namespace, name, "warming", state="Downloading", targetNodes=3)
        assert replacement in warming["message"] and warming["readyNodes"] == 2
        status = fleet.wait_status(api_client, namespace, name, "warm", state="Ready", targetNodes=3, readyNodes=3)
        assert {n["node"] for n in status["nodes"]} == {targets[0], targets[2], replacement}
        assert fleet.labeled(api_client, name) == {targets[0], targets[2], replacement}
        assert interrupted not in fleet.job_nodes(api_client, namespace)
        fleet.delete_all(api_client, namespace)
