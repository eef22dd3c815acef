"""Status follows events, not the resync timer: with a resync interval of an hour, an endpoint still goes from
creation to DeploymentComplete and follows a scale-out, because its Deployment, its pods, its caches' status, the
preload Jobs and the pre-pull pods wake the objects whose status they change (controllers/waking.py).

bench/status_latency.py measures how fast (event -> status) with the chart's default resync.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.controllers import storage

pytestmark = pytest.mark.cluster

NAME = "followed"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _available(status: dict[str, Any]) -> int:
    return int(((status.get("deploymentStatus") or {}).get("status") or {}).get("availableReplicas") or 0)


def test_an_endpoint_rolls_out_and_scales_with_no_timer_to_help(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    preload = {"preload_pod_annotations": {"sim.warmstart.io/duration": "2s"}}
    # nodes of its own (nothing another test left on shared nodes can hold a cache back until the hour is up)
    with (
        ep.own_nodes(api_client, 2) as (instance_type, _nodes),
        operating.operator(str(cluster.kubeconfig), [namespace], render=preload, resync_seconds=3600.0),
    ):
        kube.create_custom(api_client, ep.endpoint_manifest(NAME, namespace, instance_type))
        done: dict[str, Any] = kube.wait_for(
            lambda: s if (s := ep.status(api_client, namespace, NAME)).get("state") == "DeploymentComplete" else None,
            timeout=180,
            what="DeploymentComplete (woken by the caches' status and the Deployment, not by a timer)",
        )
        assert done["weightsCacheStatus"]["state"] == "Ready"
        assert done["weightsCacheStatus"]["readyNodes"] == 2
        (mic,) = ep.caches(api_client, namespace, "modelimagecaches")
        assert mic["status"]["state"] == "Ready", "the image cache follows its pre-pull pods and DaemonSet"
        assert done["imageCacheStatus"]["state"] == "Ready", "the endpoint follows its image cache"
        assert _available(done) == 1

        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", NAME, {"spec": {"replicas": 3}}
        )
        scaled: dict[str, Any] = kube.wait_for(
            lambda: s if _available(s := ep.status(api_client, namespace, NAME)) == 3 else None,
            timeout=180,
            what="the scale-out in the endpoint's status (woken by the Deployment's progress)",
        )
        assert scaled["state"] == "DeploymentComplete" and scaled["replicas"] == 3


@contextmanager
def _deployment_gets(namespace: str) -> Iterator[list[str]]:
    """Every GET of a single Deployment in ``namespace`` that the operator's API client sends while the block runs.

    Every request of the operator's controllers goes through `storage.CountingApiClient.call_api` (kopf's own client
    only lists, watches and patches). The API server's own counter would also count other clients of the shared
    cluster (one such GET, not ours, once made this test fail in CI).
    """
    seen: list[str] = []
    original = storage.CountingApiClient.call_api
    pattern = re.compile(rf"^/apis/apps/v1/namespaces/{re.escape(namespace)}/deployments/[^/]+$")

    def spy(self: storage.CountingApiClient, resource_path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and pattern.match(resource_path):
            seen.append(resource_path)
        return original(self, resource_path, method, *args, **kwargs)

    storage.CountingApiClient.call_api = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        storage.CountingApiClient.call_api = original  # type: ignore[method-assign]


def test_a_settled_endpoints_status_passes_read_its_deployments_from_the_watch(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    """Every status pass of a settled endpoint (here 10 in 5 s) reads its model and router Deployments from the
    operator's index, so a fleet of idle endpoints costs the API server no reads; the status still follows them."""
    with (
        ep.own_nodes(api_client, 1) as (instance_type, _nodes),
        operating.operator(str(cluster.kubeconfig), [namespace], resync_seconds=0.5),
    ):
        manifest = ep.endpoint_manifest(NAME, namespace, instance_type)
        manifest["spec"]["intelligentRoutingSpec"] = {"enabled": True}
        kube.create_custom(api_client, manifest)
        kube.wait_for(
            lambda: (
                s
                if (s := ep.status(api_client, namespace, NAME)).get("state") == "DeploymentComplete"
                and any(c["type"] == "Routing" and c["reason"] == "ThroughRouter" for c in s.get("conditions", []))
                else None
            ),
            timeout=180,
            what="DeploymentComplete, through the router",
        )
        with _deployment_gets(namespace) as gets:
            time.sleep(5.0)
        assert gets == [], f"a status pass GETs a Deployment: {gets}"

        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", NAME, {"spec": {"replicas": 2}}
        )
        scaled: dict[str, Any] = kube.wait_for(
            lambda: s if _available(s := ep.status(api_client, namespace, NAME)) == 2 else None,
            timeout=120,
            what="the scale-out in the status, read from the index",
        )
        assert scaled["replicas"] == 2
