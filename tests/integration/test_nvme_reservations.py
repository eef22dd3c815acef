"""Two caches that start on one node at once cannot both pass the NVMe capacity check, on the real control plane.

Both caches exist before the operator starts, so their first reconciles run side by side from indexes that show
neither on the nodes: without an atomic reservation, both would start a preload on every node. Each node (kwok,
100 GB of NVMe) holds only one of the two 60 GB models. Nothing is faked: the reservation is a node annotation
written with the node's resourceVersion as a precondition, and the API server decides which write wins.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import fleet
import kube
import operating
from nodepool import NodePool
from warmstart.api import nodelabels
from warmstart.placement import GB

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def reservations(api: client.ApiClient, nodes: list[str]) -> dict[str, list[str]]:
    """node -> the reservation annotations on it, for the nodes that hold any."""
    core = client.CoreV1Api(api)
    found = {node: (core.read_node(node).metadata.annotations or {}) for node in nodes}
    held = {
        node: sorted(a for a in notes if a.startswith(nodelabels.RESERVED_WEIGHTS_PREFIX))
        for node, notes in found.items()
    }
    return {node: names for node, names in held.items() if names}


def test_two_caches_starting_at_once_on_nodes_that_fit_one_are_admitted_once_per_node(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(3, nvme=100 * GB)
    names = [
        kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type], f"models/{m}", modelSizeBytes=60 * GB))
        for m in ("a", "b")
    ]
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render(duration="3s")):

        def settled() -> dict[str, dict[str, Any]] | None:
            statuses = {n: fleet.status_of(api_client, namespace, n) for n in names}
            entries = [e for s in statuses.values() for e in s.get("nodes") or []]
            done = len(entries) == 6 and all(e["state"] in ("Ready", "Failed") for e in entries)
            return statuses if done else None

        statuses = kube.wait_for(settled, fleet.TIMEOUT, what="every node Ready for one cache, refused to the other")
        jobs = fleet.job_nodes(api_client, namespace)
        assert sorted(jobs) == sorted(targets), f"one preload Job per node, not one per cache and node: {jobs}"
        for node in targets:
            states = {name: next(e for e in status["nodes"] if e["node"] == node) for name, status in statuses.items()}
            ready = [name for name, e in states.items() if e["state"] == "Ready"]
            assert len(ready) == 1, f"{node}: exactly one cache admitted, got {states}"
            (refused,) = (e for e in states.values() if e["state"] == "Failed")
            assert refused["reason"] == "InsufficientCapacity", refused
            assert "60.0 GB used by other caches: does not fit" in refused["message"], refused["message"]
        labelled = {name: fleet.labeled(api_client, name) for name in names}
        assert sorted(labelled[names[0]] | labelled[names[1]]) == sorted(targets)
        assert not labelled[names[0]] & labelled[names[1]], labelled
        assert reservations(api_client, targets) == {}, "the ready label took over the bytes"

        # nothing is lost: once the cache that won a node is gone, the other fills that node too
        winner = next(name for name in names if labelled[name])
        loser = next(name for name in names if name != winner)
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            "inference.sagemaker.aws.amazon.com", "v1", namespace, "modeldatacacheconfigs", winner
        )
        fleet.wait_status(api_client, namespace, loser, "fills every node", state="Ready", readyNodes=3)
        assert fleet.labeled(api_client, loser) == set(targets)
        assert reservations(api_client, targets) == {}
        fleet.delete_all(api_client, namespace)
