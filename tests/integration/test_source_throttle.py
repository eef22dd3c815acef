"""The warm-up throttle counts per source across namespaces, on the real control plane with kwok nodes.

Two tenants cache the same model: two caches in two namespaces (their keys differ: a private source is cached per
namespace), on the same nodes. Counted per cache, each would start `limit` preloads and the storage backend would see
twice the load; counted per source, the preloads of both caches together stay within one limit, and both caches still
fill every node.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import fleet
import kube
import operating
from nodepool import NodePool

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def running(api: client.ApiClient, namespaces: list[str]) -> int:
    return sum(
        1 for ns in namespaces for j in fleet.preload_jobs(api, ns) if not j.status.succeeded and not j.status.failed
    )


def test_two_tenants_warming_the_same_model_share_one_limit_and_both_fill_every_node(
    cluster: Any, api_client: client.ApiClient, namespace: str, second_namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(4)
    tenants = [namespace, second_namespace]
    settings = fleet.render(duration="3s", preload_concurrency_nodes=2, preload_concurrency_percent=1)
    with operating.operator(str(cluster.kubeconfig), tenants, render=settings):
        caches = [
            (ns, kube.create_custom(api_client, fleet.mdcc(ns, [instance_type], "models/shared"))) for ns in tenants
        ]
        assert caches[0][1] != caches[1][1], "a private source is cached per namespace: two caches, two keys"
        peak = 0

        def both_ready() -> bool:
            nonlocal peak
            peak = max(peak, running(api_client, tenants))
            statuses = [fleet.status_of(api_client, ns, name) for ns, name in caches]
            return all(s.get("state") == "Ready" and s.get("readyNodes") == 4 for s in statuses)

        kube.wait_for(both_ready, fleet.TIMEOUT, interval=0.2, what="both tenants' caches warm on every node")
        assert peak == 2, f"at most 2 preloads of the one source at once across both namespaces (saw {peak})"
        for ns, _ in caches:
            assert fleet.job_nodes(api_client, ns) == sorted(targets)
        for ns in tenants:
            fleet.delete_all(api_client, ns)
