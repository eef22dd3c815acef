"""The endpoint's own Service on the real control plane: it reaches the router pods while routing is on and the model
pods while it is off, and switching either way never leaves it without a ready endpoint; the router's disruption
budget and replicas; its warmNodes follow the node labels.

The EndpointSlices are the ones the real EndpointSlice controller computes from the Service and the (kwok) pods:
they are what kube-proxy programs, so "selects the router pods" is checked where clients would feel it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.api import nodelabels
from warmstart.api.blocks import DEFAULT_HOST_PATH
from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import keys, router

pytestmark = pytest.mark.cluster

NAME = "routed"
ROUTER = router.name(NAME)
PLURAL = "inferenceendpointconfigs"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _targets(api: client.ApiClient, namespace: str, service: str) -> list[str]:
    """Names of the ready pods behind `service`, from its EndpointSlices."""
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return sorted(
        e.target_ref.name
        for s in slices.items
        for e in s.endpoints or []
        if e.target_ref is not None and (e.conditions is None or e.conditions.ready is not False)
    )


def _kind(pod: str) -> str:
    return "router" if pod.startswith(f"{ROUTER}-") else "model"


@dataclasses.dataclass
class Sample:
    at: float
    targets: list[str]
    router_exists: bool


@contextmanager
def _watching(api: client.ApiClient, namespace: str) -> Iterator[list[Sample]]:
    """Sample the client Service's ready pods and the router Deployment's existence every 0.2 s."""
    samples: list[Sample] = []
    stop = threading.Event()
    apps = client.AppsV1Api(api)

    def exists() -> bool:
        try:
            apps.read_namespaced_deployment(ROUTER, namespace)
            return True
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise

    def run() -> None:
        while not stop.is_set():
            samples.append(Sample(time.monotonic(), _targets(api, namespace, NAME), exists()))
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(10)


def _routing(api: client.ApiClient, namespace: str, enabled: bool) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        ep.GROUP, ep.VERSION, namespace, PLURAL, NAME, {"spec": {"intelligentRoutingSpec": {"enabled": enabled}}}
    )


def _all(kind: str, targets: list[str], count: int) -> bool:
    return len(targets) == count and all(_kind(t) == kind for t in targets)


def test_client_service_moves_to_the_router_and_back_without_a_gap(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with ep.own_nodes(api_client, 2) as (instance_type, _nodes):
        body = ep.endpoint_manifest(
            NAME, namespace, instance_type, modelCacheConfig=None, replicas=2, intelligentRoutingSpec={"enabled": False}
        )
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            kube.create_custom(api_client, body)
            kube.wait_for(
                lambda: _all("model", _targets(api_client, namespace, NAME), 2), 120, what="2 model pods behind it"
            )

            # on: the Service moves to the router once a router pod is ready, never to a router that is not
            with _watching(api_client, namespace) as samples:
                _routing(api_client, namespace, True)
                kube.wait_for(
                    lambda: _all("router", _targets(api_client, namespace, NAME), 2),
                    120,
                    what="the client Service to reach the 2 router pods",
                )
            assert all(s.targets for s in samples), "the Service had no ready pod at some point"
            # the router follows the model pods through their own headless Service
            models = router.models_service_name(NAME)
            assert _all("model", _targets(api_client, namespace, models), 2)
            spec = client.CoreV1Api(api_client).read_namespaced_service(models, namespace).spec
            assert spec.cluster_ip == "None"
            assert ep.status(api_client, namespace, NAME)["routerName"] == ROUTER

            # off: back to the model pods first; the router goes only after that
            with _watching(api_client, namespace) as samples:
                _routing(api_client, namespace, False)
                kube.wait_for(
                    lambda: kube.get(str(cluster.kubeconfig), "deployment", ROUTER, namespace) is None,
                    60,
                    what="the router removed",
                )
                kube.wait_for(
                    lambda: _all("model", _targets(api_client, namespace, NAME), 2), 60, what="model pods again"
                )
                # the sampler reads on its own clock: let it record the removal the waits above saw
                kube.wait_for(lambda: any(not s.router_exists for s in samples), 30, what="the removal sampled")
            assert all(s.targets for s in samples), "the Service had no ready pod at some point"
            gone = next(i for i, s in enumerate(samples) if not s.router_exists)
            assert any(_all("model", s.targets, 2) for s in samples[:gone]), (
                "the router was deleted before the Service reached the model pods"
            )
            # the operator deletes the router's objects one after the other in the same pass: all of them go
            leftovers = [
                *(("service", n) for n in (models, ROUTER)),  # the model pods' Service, the routers' peers Service
                *((k, ROUTER) for k in ("configmap", "poddisruptionbudget", "role", "networkpolicy")),
                ("secret", router.sync_secret_name(NAME)),
            ]

            def left() -> list[str]:
                return [
                    f"{k}/{n}" for k, n in leftovers if kube.get(str(cluster.kubeconfig), k, n, namespace) is not None
                ]

            kube.wait_for(lambda: not left(), 60, what="every router object removed")
            kube.wait_for(lambda: "routerName" not in ep.status(api_client, namespace, NAME), what="routerName gone")


def _warm_nodes(cluster: Any, namespace: str) -> tuple[str, ...] | None:
    configmap = kube.get(str(cluster.kubeconfig), "configmap", ROUTER, namespace)
    if configmap is None:
        return None
    return RouterConfig.from_configmap_data(configmap.get("data")).warm_nodes


def test_router_replicas_budget_and_warm_nodes_follow_the_node_labels(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    with ep.own_nodes(api_client, 3) as (instance_type, nodes):
        body = ep.endpoint_manifest(
            NAME,
            namespace,
            instance_type,
            maxDeployTimeInSeconds=0,
            intelligentRoutingSpec={"enabled": True, "routerReplicas": 3},
        )
        source = ModelSourceConfig.model_validate(body["spec"]["modelSourceConfig"])
        label = nodelabels.weights_ready_label(keys.weights_key_in(source, DEFAULT_HOST_PATH, namespace, {}))
        core.patch_node(nodes[0], {"metadata": {"labels": {label: nodelabels.READY}}})
        # the preload Jobs never finish here: the labels are the test's to set
        with operating.operator(
            str(cluster.kubeconfig),
            [namespace],
            render={"preload_pod_annotations": {"sim.warmstart.io/duration": "600s"}},
        ):
            kube.create_custom(api_client, body)
            kube.wait_for(lambda: _warm_nodes(cluster, namespace) == (nodes[0],), 120, what="warmNodes of node 0")

            deployment = kube.wait_for(
                lambda: kube.get(str(cluster.kubeconfig), "deployment", ROUTER, namespace), what="the router"
            )
            assert deployment["spec"]["replicas"] == 3
            budget = kube.get(str(cluster.kubeconfig), "poddisruptionbudget", ROUTER, namespace)
            assert budget is not None
            assert budget["spec"]["maxUnavailable"] == 1
            assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
            assert [o["kind"] for o in budget["metadata"]["ownerReferences"]] == ["InferenceEndpointConfig"]
            # the disruption controller counts the router pods
            kube.wait_for(
                lambda: (
                    (b := kube.get(str(cluster.kubeconfig), "poddisruptionbudget", ROUTER, namespace))
                    and (b.get("status") or {}).get("expectedPods") == 3
                    and b
                ),
                120,
                what="the budget to cover 3 router pods",
            )

            core.patch_node(nodes[1], {"metadata": {"labels": {label: nodelabels.READY}}})
            kube.wait_for(
                lambda: _warm_nodes(cluster, namespace) == tuple(sorted(nodes[:2])), 60, what="node 1 warm too"
            )
            core.patch_node(nodes[0], {"metadata": {"labels": {label: None}}})
            kube.wait_for(lambda: _warm_nodes(cluster, namespace) == (nodes[1],), 60, what="node 0 no longer warm")
            configmap = kube.get(str(cluster.kubeconfig), "configmap", ROUTER, namespace)
            assert configmap is not None
            assert yaml.safe_load(configmap["data"][CONFIGMAP_KEY])["warmNodes"] == [nodes[1]]


def test_an_endpoint_whose_child_name_another_endpoint_controls_is_refused_and_takes_nothing(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    """Endpoint `routed` renders the `routed-models` Service; an endpoint named `routed-models` would render a client
    Service of that name. The second is refused with a status naming the owner; the first keeps its Service."""
    models = router.models_service_name(NAME)
    core = client.CoreV1Api(api_client)
    with ep.own_nodes(api_client, 1) as (instance_type, _nodes):
        routing = {"enabled": True}
        first = ep.endpoint_manifest(
            NAME, namespace, instance_type, modelCacheConfig=None, intelligentRoutingSpec=routing
        )
        second = ep.endpoint_manifest(models, namespace, instance_type, modelCacheConfig=None)
        with operating.operator(str(cluster.kubeconfig), [namespace]):
            kube.create_custom(api_client, first)
            owned = kube.wait_for(
                lambda: kube.get(str(cluster.kubeconfig), "service", models, namespace), 120, what="routed-models"
            )
            kube.create_custom(api_client, second)
            failed = kube.wait_for(
                lambda: (s := ep.status(api_client, namespace, models)).get("state") == "DeploymentFailed" and s,
                120,
                what=f"{models} refused",
            )
            message = ep.condition(failed, "Ready")["message"]
            assert f"Service {models} already belongs to InferenceEndpointConfig {NAME}" in message
            kept = core.read_namespaced_service(models, namespace)
            assert [o.name for o in kept.metadata.owner_references if o.controller] == [NAME]
            assert kept.spec.cluster_ip == "None", "the router's headless Service was rewritten"
            assert owned["metadata"]["uid"] == kept.metadata.uid
