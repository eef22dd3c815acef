"""The router follows EndpointSlices and its ConfigMap on the real API server, live, without a restart.

Addresses in the slices are never contacted: these tests watch what the router *knows* (its
fleet and strategy), first in-process and then through a running ``warmstart router``'s
``/router/status``. The router believes only slices the EndpointSlice controller keeps for the
Service; the live-update tests write such slices themselves (labelled and owned as the controller
does, for a Service without a selector, which the controller leaves alone), and one test has the
real controller compute the slice from a (kwok) pod while slices written by hand are ignored.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

import kube
from nodepool import NodePool
from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.localcluster import running
from warmstart.router import discovery, trusting
from warmstart.router.routing import Router

pytestmark = pytest.mark.cluster

SERVICE = "model"
CONFIGMAP = "model-router"


def selectorless_service(api_client: client.ApiClient, namespace: str) -> str:
    """The Service ``model`` without a selector (the EndpointSlice controller leaves its slices alone); its uid."""
    service = {"metadata": {"name": SERVICE}, "spec": {"ports": [{"name": "http", "port": 8000}]}}
    return str(client.CoreV1Api(api_client).create_namespaced_service(namespace, service).metadata.uid)


def endpoint_slice(
    name: str, endpoints: list[tuple[str, bool]], port: int = 8000, owner: str | None = None
) -> dict[str, Any]:
    """A slice of the Service ``model``: labelled and owned as the EndpointSlice controller does when ``owner``
    (the Service's uid) is given, else as a tenant would write it by hand."""
    labels = {trusting.SERVICE_NAME_LABEL: SERVICE}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        labels[trusting.MANAGED_BY_LABEL] = trusting.CONTROLLER
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Service", "name": SERVICE, "uid": owner, "controller": True}
        ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": metadata,
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [address], "conditions": {"ready": ready}, "nodeName": f"node-{address.rsplit('.', 1)[1]}"}
            for address, ready in endpoints
        ],
    }


def configmap(strategy: str) -> dict[str, Any]:
    return {
        "metadata": {"name": CONFIGMAP},
        "data": {CONFIGMAP_KEY: RouterConfig(strategy=strategy, max_concurrent_requests=16).to_yaml()},
    }


async def eventually(probe: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


async def test_watcher_applies_slices_and_configmap_live(api_client: client.ApiClient, namespace: str) -> None:
    core, disc = client.CoreV1Api(api_client), client.DiscoveryV1Api(api_client)
    uid = selectorless_service(api_client, namespace)
    core.create_namespaced_config_map(namespace, configmap("random"))
    disc.create_namespaced_endpoint_slice(
        namespace, endpoint_slice("model-a", [("10.244.0.1", True), ("10.244.0.2", False)], owner=uid)
    )
    router = Router()
    watcher = discovery.KubernetesWatcher(api_client, namespace, SERVICE, CONFIGMAP, watch_seconds=5)
    await watcher.start(router)
    try:
        await eventually(lambda: router.fleet.urls() == ["http://10.244.0.1:8000"], "the ready endpoint only")
        assert router.config.max_concurrent_requests == 16
        [replica] = router.fleet.replicas()
        assert replica.node == "node-1"  # the slice's nodeName, for the warm/cold placement metric

        core.patch_namespaced_config_map(CONFIGMAP, namespace, configmap("prefix_aware"))
        await eventually(lambda: router.strategy.value == "prefixaware", "the strategy change")

        disc.create_namespaced_endpoint_slice(namespace, endpoint_slice("model-b", [("10.244.0.3", True)], owner=uid))
        disc.patch_namespaced_endpoint_slice(
            "model-a", namespace, endpoint_slice("model-a", [("10.244.0.1", True), ("10.244.0.2", True)], owner=uid)
        )
        await eventually(lambda: len(router.fleet) == 3, "scale-out to three ready endpoints")

        disc.delete_namespaced_endpoint_slice("model-a", namespace)
        await eventually(lambda: router.fleet.urls() == ["http://10.244.0.3:8000"], "scale-in to one")
        core.patch_namespaced_config_map(CONFIGMAP, namespace, {"data": {CONFIGMAP_KEY: "strategy: [not, valid"}})
        await eventually(lambda: router.config_error is not None, "the invalid ConfigMap to be reported")
        assert router.strategy.value == "prefixaware"  # an invalid document changes nothing else
        assert router.status()["configError"]["source"] == f"configmap {namespace}/{CONFIGMAP}"
        core.patch_namespaced_config_map(CONFIGMAP, namespace, {"data": {CONFIGMAP_KEY: "strategy: session"}})
        await eventually(lambda: router.strategy.value == "session", "a later valid ConfigMap to apply")
        assert router.config_error is None
    finally:
        await watcher.stop()


async def test_slices_written_by_hand_are_ignored(
    api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    core, disc = client.CoreV1Api(api_client), client.DiscoveryV1Api(api_client)
    _, [node] = own_nodes.add(1)
    # first what a tenant who may write EndpointSlices could plant: a plain slice naming the Service, and one that
    # also claims the controller's label (without the Service as its owner)
    disc.create_namespaced_endpoint_slice(namespace, endpoint_slice("model-planted", [("10.244.9.1", True)]))
    forged = endpoint_slice("model-forged", [("10.244.9.2", True)])
    forged["metadata"]["labels"][trusting.MANAGED_BY_LABEL] = trusting.CONTROLLER
    disc.create_namespaced_endpoint_slice(namespace, forged)
    router = Router()
    watcher = discovery.KubernetesWatcher(api_client, namespace, SERVICE, None, watch_seconds=5)
    await watcher.start(router)
    try:
        # then the real thing: a Service with a selector, a (kwok) pod, and the slice the real controller computes
        pod = {
            "metadata": {"name": "model-0", "labels": {"app": "model"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "m", "image": "model:1", "ports": [{"name": "http", "containerPort": 8000}]}],
            },
        }
        core.create_namespaced_pod(namespace, pod)
        service = {
            "metadata": {"name": SERVICE},
            "spec": {"selector": {"app": "model"}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
        }
        core.create_namespaced_service(namespace, service)
        ip = kube.wait_for(
            lambda: core.read_namespaced_pod("model-0", namespace).status.pod_ip, 120, what="the pod's IP"
        )
        # the watch delivers events in order: once the controller's slice is seen, so were the planted ones
        await eventually(lambda: len(router.fleet) > 0, "the controller's slice", timeout=120)
        assert router.fleet.urls() == [f"http://{ip}:8000"]
        names = {item.metadata.name for item in disc.list_namespaced_endpoint_slice(namespace).items}
        assert "model-planted" in names  # still there, and still ignored
    finally:
        await watcher.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/router/status", timeout=5) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_running_router_reports_strategy_changes(
    cluster: running.Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    core, disc = client.CoreV1Api(api_client), client.DiscoveryV1Api(api_client)
    uid = selectorless_service(api_client, namespace)
    core.create_namespaced_config_map(namespace, configmap("roundrobin"))
    disc.create_namespaced_endpoint_slice(namespace, endpoint_slice("model-x", [("10.244.1.1", True)], owner=uid))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warmstart.cli",
            "router",
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--admin-port",
            str(port),  # /router/status is on the admin port
            "--namespace",
            namespace,
            "--service",
            SERVICE,
            "--configmap",
            CONFIGMAP,
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
    )
    try:

        def wait(predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
            deadline = time.monotonic() + 30
            while True:
                try:
                    current = status(port)
                    if predicate(current):
                        return current
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"router never reported {what}")
                time.sleep(0.2)

        wait(lambda s: s["strategy"] == "roundrobin" and len(s["backends"]) == 1, "its initial state")
        core.patch_namespaced_config_map(CONFIGMAP, namespace, configmap("kvaware"))
        now = wait(lambda s: s["strategy"] == "kvaware", "the kvaware strategy")
        assert now["effectiveStrategy"] == "prefixaware"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
