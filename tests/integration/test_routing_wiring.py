"""Routing wiring on the real control plane: the operator renders the router; a strategy change reaches it live."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.routers import RouterConfig
from warmstart.render import endpoints
from warmstart.render import router as router_render
from warmstart.render.context import RenderContext

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _router_status(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/router/status", timeout=2) as response:
            value: dict[str, Any] = json.loads(response.read())
            return value
    except OSError:
        return None


def check_network_policy(api_client: client.ApiClient, kubeconfig: str, namespace: str, body: dict[str, Any]) -> None:
    """The operator applied the router's NetworkPolicy: the traffic port open, the admin port to nobody; with admin
    peers configured (the chart's router.adminFrom) the rendered policy is accepted by the API server too."""
    policy = kube.wait_for(
        lambda: kube.get(kubeconfig, "networkpolicy", "routed-router", namespace), what="the router's NetworkPolicy"
    )
    assert policy["spec"]["podSelector"]["matchLabels"] == router_render.pod_selector(
        _endpoint(api_client, namespace, body)
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": router_render.ROUTER_PORT, "protocol": "TCP"}]},
        # the routers' sync port: the endpoint's own router pods only
        {
            "from": [{"podSelector": {"matchLabels": selector}}],
            "ports": [{"port": router_render.ROUTER_SYNC_PORT, "protocol": "TCP"}],
        },
    ]
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    context = RenderContext(router_admin_from=(peer,))
    rendered = router_render.network_policy(_endpoint(api_client, namespace, body), context)
    rendered["metadata"]["name"] = "routed-router-admin"
    created = client.NetworkingV1Api(api_client).create_namespaced_network_policy(namespace, rendered, dry_run="All")
    [_, _, admin] = created.spec.ingress
    assert [p.port for p in admin.ports] == [router_render.ROUTER_ADMIN_PORT]
    assert admin._from[0].namespace_selector.match_labels == {"kubernetes.io/metadata.name": "monitoring"}


def _endpoint(api_client: client.ApiClient, namespace: str, body: dict[str, Any]) -> endpoints.Endpoint:
    live = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", body["metadata"]["name"]
    )
    meta = live["metadata"]
    ref = endpoints.ObjectRef(
        kind="InferenceEndpointConfig", name=meta["name"], namespace=namespace, uid=meta["uid"], generation=1
    )
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(live["spec"]))


def test_strategy_change_reaches_the_running_router_without_restart(
    cluster: Any, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        body = ep.endpoint_manifest(
            "routed",
            namespace,
            instance_type,
            modelCacheConfig=None,
            replicas=2,
            intelligentRoutingSpec={"enabled": True, "routingStrategy": "roundrobin"},
        )
        body["spec"]["worker"]["requestLimits"] = {"maxConcurrentRequests": 16}
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", body
            )
            kube.wait_for(
                lambda: kube.get(str(cluster.kubeconfig), "deployment", "routed-router", namespace),
                what="router Deployment",
            )
            role = kube.get(str(cluster.kubeconfig), "role", "routed-router", namespace)
            assert role is not None
            assert {tuple(r["resources"]) for r in role["rules"]} == {("endpointslices",), ("configmaps",)}
            assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in role["rules"])
            check_network_policy(api_client, str(cluster.kubeconfig), namespace, body)
            kube.wait_for(
                lambda: ep.status(api_client, namespace, "routed").get("state") == "DeploymentComplete",
                timeout=120,
                what="endpoint complete",
            )

            port = _free_port()
            # the router authenticates as the ServiceAccount the operator rendered,
            # so its least-privilege Role is what it gets
            router_kubeconfig = kube.service_account_kubeconfig(
                api_client, cluster.kubeconfig, namespace, "routed-router", tmp_path / "router.kubeconfig"
            )
            router = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "warmstart.cli",
                    "router",
                    "--kubeconfig",
                    str(router_kubeconfig),
                    "--namespace",
                    namespace,
                    "--service",
                    "routed-models",  # what the router Deployment follows: the model pods' headless Service
                    "--configmap",
                    "routed-router",
                    "--port",
                    str(_free_port()),
                    "--admin-port",
                    str(port),  # /router/status is on the admin port
                    "--host",
                    "127.0.0.1",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                first = kube.wait_for(
                    lambda: (
                        (s := _router_status(port))
                        and s.get("strategy") == "roundrobin"
                        and len(s.get("backends", [])) == 2
                        and s
                    ),
                    timeout=60,
                    what="router with 2 replicas",
                )
                assert first["config"]["maxConcurrentRequests"] == 16
                client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                    ep.GROUP,
                    ep.VERSION,
                    namespace,
                    "inferenceendpointconfigs",
                    "routed",
                    {"spec": {"intelligentRoutingSpec": {"routingStrategy": "prefixaware"}}},
                )
                kube.wait_for(
                    lambda: (s := _router_status(port)) and s.get("strategy") == "prefixaware",
                    timeout=60,
                    what="the live strategy change",
                )
                assert router.poll() is None, "the router kept running"
                client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                    ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "routed", {"spec": {"replicas": 3}}
                )
                kube.wait_for(
                    lambda: (s := _router_status(port)) and len(s.get("backends", [])) == 3,
                    timeout=60,
                    what="the scale event to reach the router",
                )
            finally:
                router.terminate()
                router.wait(10)
            assert ep.status(api_client, namespace, "routed")["routerName"] == "routed-router"
            client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                ep.GROUP,
                ep.VERSION,
                namespace,
                "inferenceendpointconfigs",
                "routed",
                {"spec": {"intelligentRoutingSpec": {"enabled": False}}},
            )
            kube.wait_for(
                lambda: kube.get(str(cluster.kubeconfig), "deployment", "routed-router", namespace) is None,
                what="the router removed",
            )
            assert kube.get(str(cluster.kubeconfig), "configmap", "routed-router", namespace) is None
            assert kube.get(str(cluster.kubeconfig), "role", "routed-router", namespace) is None
            kube.wait_for(
                lambda: "routerName" not in ep.status(api_client, namespace, "routed"), what="routerName cleared"
            )


def test_request_limits_alone_put_the_enforcing_router_in_front_of_the_replicas(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    """No intelligentRoutingSpec: `maxConcurrentRequests` alone renders the router that enforces it, the Service
    sends clients to it, and UnsupportedFields stays empty."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    with ep.own_nodes(api_client, 1) as (instance_type, _nodes):
        body = ep.endpoint_manifest("capped", namespace, instance_type, modelCacheConfig=None)
        limits = {"maxConcurrentRequests": 4, "maxQueueSize": 2, "overflowStatusCode": 503}
        body["spec"]["worker"]["requestLimits"] = limits
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            kube.create_custom(api_client, body)
            configmap = kube.wait_for(
                lambda: next(
                    (c for c in core.list_namespaced_config_map(namespace).items if "router.yaml" in (c.data or {})),
                    None,
                ),
                what="the router's ConfigMap",
            )
            config = RouterConfig.from_configmap_data(configmap.data)
            assert (config.strategy.value, config.max_concurrent_requests) == ("random", 4)
            assert (config.max_queue_size, config.overflow_status_code) == (2, 503)
            kube.wait_for(
                lambda: (
                    apps.list_namespaced_deployment(
                        namespace, field_selector=f"metadata.name={router_render.name('capped')}"
                    ).items
                ),
                what="the router Deployment",
            )
            ref = endpoints.ObjectRef(kind="InferenceEndpointConfig", name="capped", namespace=namespace, uid="x")
            wanted = router_render.pod_selector(
                endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(body["spec"]))
            )
            kube.wait_for(
                lambda: core.read_namespaced_service("capped", namespace).spec.selector == wanted,
                what="the Service sending clients to the router",
            )
            unsupported = kube.wait_for(
                lambda: ep.condition(ep.status(api_client, namespace, "capped"), "UnsupportedFields"),
                what="the UnsupportedFields condition",
            )
            assert unsupported["status"] == "False", unsupported
