"""Throttled warm-up and several models per NVMe, on the real control plane with kwok nodes.

- At most `preloadConcurrency` nodes preload one cache at once; the rest wait as Queued and the cache still reaches
  Ready on every node (the gate's rule is unchanged).
- The capacity check counts the caches already on a node; under EvictUnreferencedLRU an unreferenced cache is evicted
  (label removed, node marked, cleanup Job run) to make room, and a cache in use never is. NVMe use is in status and
  in the operator's gauges; a node's gauges leave /metrics when the node is deleted or no cache targets it.
"""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

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


def parent(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """A stand-in endpoint: a ConfigMap the cache lists as its parent."""
    made = client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": made.metadata.uid}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nvme_series(port: int) -> dict[str, set[str]]:
    """Nodes that have a series in the operator's /metrics, per NVMe gauge."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = {"warmstart_node_nvme_used_bytes", "warmstart_node_nvme_free_bytes"}
    found: dict[str, set[str]] = {name: set() for name in wanted}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name].add(sample.labels["node"])
    return found


def running_jobs(api: client.ApiClient, namespace: str) -> int:
    return sum(1 for j in fleet.preload_jobs(api, namespace) if not j.status.succeeded and not j.status.failed)


def test_the_operator_setting_limits_concurrent_preloads_and_every_node_still_gets_warm(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(6)
    settings = fleet.render(duration="3s", preload_concurrency_nodes=2, preload_concurrency_percent=1)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=settings):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        peak, queued_seen = 0, 0

        def ready() -> dict[str, Any] | None:
            nonlocal peak, queued_seen
            peak = max(peak, running_jobs(api_client, namespace))
            status = fleet.status_of(api_client, namespace, name)
            queued_seen = max(queued_seen, status.get("queuedNodes") or 0)
            return status if status.get("state") == "Ready" and status.get("readyNodes") == 6 else None

        status = kube.wait_for(ready, fleet.TIMEOUT, interval=0.2, what="all six nodes warm")
        assert peak == 2, f"at most 2 preloads at once, and the limit was used (saw {peak})"
        assert queued_seen >= 3 and status["preloadConcurrency"] == 2 and "queuedNodes" not in status
        assert fleet.job_nodes(api_client, namespace) == sorted(targets)
        fleet.delete_all(api_client, namespace)


def test_a_cache_that_does_not_fit_next_to_another_fails_on_that_node_when_eviction_is_off(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2, nvme=100 * GB)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render()):
        first = kube.create_custom(
            api_client, fleet.mdcc(namespace, [instance_type], "models/a", modelSizeBytes=60 * GB)
        )
        fleet.wait_status(api_client, namespace, first, "ready", state="Ready", readyNodes=2)
        used = fleet.wait_status(api_client, namespace, first, "usage", state="Ready")["nodes"][0]
        assert (used["nvmeUsedBytes"], used["nvmeFreeBytes"]) == (60 * GB, 40 * GB)

        endpoint = parent(api_client, namespace, "endpoint-b")
        spec = {"modelSizeBytes": 40 * GB, "parentReferences": [endpoint]}
        second = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type], "models/b", **spec))
        status = fleet.wait_status(api_client, namespace, second, "failed", state="Failed")
        assert {n["reason"] for n in status["nodes"]} == {"InsufficientCapacity"}
        assert "60.0 GB used by other caches: does not fit" in status["nodes"][0]["message"]
        assert fleet.labeled(api_client, first) == set(targets) and fleet.job_nodes(api_client, namespace) == sorted(
            targets
        )
        gauge = REGISTRY.get_sample_value("warmstart_node_nvme_used_bytes", {"node": targets[0]})
        assert gauge == 60 * GB
        assert REGISTRY.get_sample_value("warmstart_node_nvme_free_bytes", {"node": targets[0]}) == 40 * GB
        fleet.delete_all(api_client, namespace)


def test_lru_eviction_makes_room_from_unreferenced_caches_and_never_from_one_in_use(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(1, nvme=100 * GB)
    settings = fleet.render(cache_eviction_policy="EvictUnreferencedLRU")
    with operating.operator(str(cluster.kubeconfig), [namespace], render=settings):
        idle = kube.create_custom(
            api_client, fleet.mdcc(namespace, [instance_type], "models/idle", modelSizeBytes=60 * GB)
        )
        fleet.wait_status(api_client, namespace, idle, "ready", state="Ready", readyNodes=1)
        in_use = {"modelSizeBytes": 40 * GB, "parentReferences": [parent(api_client, namespace, "endpoint-used")]}
        used = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type], "models/used", **in_use))
        status = fleet.wait_status(api_client, namespace, used, "evicted the idle one", state="Ready", readyNodes=1)
        assert status["nodes"][0]["nvmeUsedBytes"] == 40 * GB

        evicted = fleet.wait_status(api_client, namespace, idle, "evicted", state="Failed")
        assert evicted["nodes"][0]["reason"] == "Evicted"
        node = client.CoreV1Api(api_client).read_node(targets[0])
        assert nodelabels.weights_ready_label(idle.removeprefix("weights-")) not in node.metadata.labels
        assert nodelabels.weights_evicted_annotation(idle.removeprefix("weights-")) in node.metadata.annotations
        assert fleet.job_nodes(api_client, namespace, role="cleanup") == targets

        newcomer = {"modelSizeBytes": 70 * GB, "parentReferences": [parent(api_client, namespace, "endpoint-new")]}
        third = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type], "models/new", **newcomer))
        status = fleet.wait_status(api_client, namespace, third, "refused", state="Failed")
        assert status["nodes"][0]["reason"] == "InsufficientCapacity"
        assert fleet.labeled(api_client, used) == set(targets), "a cache in use is never evicted"
        fleet.delete_all(api_client, namespace)


def test_nvme_gauges_of_a_deleted_node_leave_metrics_and_so_do_those_of_nodes_no_cache_targets(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2, nvme=100 * GB)
    gone, kept = targets
    port = free_port()
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render(), metrics_port=port):
        name = kube.create_custom(
            api_client, fleet.mdcc(namespace, [instance_type], "models/a", modelSizeBytes=30 * GB)
        )
        fleet.wait_status(api_client, namespace, name, "ready", state="Ready", readyNodes=2)

        def series_of(node: str, present: bool) -> dict[str, set[str]] | None:
            found = nvme_series(port)
            return found if all((node in nodes) == present for nodes in found.values()) else None

        kube.wait_for(lambda: series_of(gone, True), fleet.TIMEOUT, what=f"NVMe gauges of {gone}")
        client.CoreV1Api(api_client).delete_node(gone)
        found = kube.wait_for(lambda: series_of(gone, False), fleet.TIMEOUT, what=f"NVMe gauges of {gone} gone")
        assert all(kept in nodes for nodes in found.values()), "a node still targeted keeps its gauges"
        status = fleet.status_of(api_client, namespace, name)
        assert [n["node"] for n in status["nodes"]] == [kept] and status["state"] == "Ready"

        fleet.delete_all(api_client, namespace)
        kube.wait_for(lambda: series_of(kept, False), fleet.TIMEOUT, what=f"NVMe gauges of {kept} gone")
