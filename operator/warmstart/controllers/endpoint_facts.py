"""What an endpoint's children show, read from the operator's watches (kopf indexes): where its Service sends
traffic, its router's and picker's ready pods, the router's warm nodes, its Deployment's rollout, and its pods'
placement on warm and cold nodes. Reads no object from the API server, but the client Service while a router retires
and its EndpointSlices until no slice lists a router pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warmstart.api import nodelabels
from warmstart.api.statuses import WarmPlacement
from warmstart.controllers import deployment_index, nodes, sharing
from warmstart.controllers.nodes import lookup as lookup_node
from warmstart.controllers.storage import Store
from warmstart.render import pickers, router, services
from warmstart.render.context import RenderContext
from warmstart.render.endpoint_status import DeploymentFacts, PickerFacts, RouterFacts
from warmstart.render.endpoints import Endpoint


def traffic(
    store: Store, indexes: Mapping[str, Any], endpoint: Endpoint, old_status: Mapping[str, Any], context: RenderContext
) -> RouterFacts:
    """Re-point the endpoint's Service without a gap.

    Routing on: to the router only once a router pod is ready (before that, and whenever none is, straight to the
    model pods). Routing off: this reconcile points the Service back at the model pods, and the router is removed by
    a later one that finds the Service already moved (`retiring` until then); router pods drain for
    `router.DRAIN_SECONDS` after that, while kube-proxy catches up.
    """
    ns = endpoint.ref.namespace
    name = router.name(endpoint.ref.name)
    if endpoint.proxy_enabled:
        found = deployment_index.deployment(indexes, ns, name)
        available = int(((found or {}).get("status") or {}).get("availableReplicas") or 0)
        desired = router.replicas(endpoint, context)
        return RouterFacts(True, services.router_available(found), False, name, available, desired)
    if not old_status.get("routerName"):
        return RouterFacts(False, False, False, name)
    current = store.get("v1", "Service", endpoint.child_name, ns)
    retiring = services.selects_router(current, endpoint) or router_still_serves(store, indexes, endpoint)
    return RouterFacts(False, False, retiring, name)


def router_still_serves(store: Store, indexes: Mapping[str, Any], endpoint: Endpoint) -> bool:
    """Whether the client Service's EndpointSlices still list a ready router pod: its selector is back on the model
    pods, but the EndpointSlice controller has not caught up yet, so the router must stay a little longer."""
    key = (endpoint.ref.namespace, endpoint.label_value, "")  # router pods carry the endpoint label, not its kind
    routers = {pod for pod, _node in sharing.lookup(indexes["endpoint_pods"], key)}
    if not routers:
        return False
    slices = store.list(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        endpoint.ref.namespace,
        label_selector=f"kubernetes.io/service-name={endpoint.child_name}",
    )
    return any(
        (found.get("targetRef") or {}).get("name") in routers
        and (found.get("conditions") or {}).get("ready") is not False
        for piece in slices
        for found in piece.get("endpoints") or []
    )


def picker_facts(
    indexes: Mapping[str, Any], endpoint: Endpoint, context: RenderContext, served: bool
) -> PickerFacts | None:
    """Gateway mode as observed (None in other modes): the pool's API and the picker Deployment's ready pods."""
    chosen = endpoint.endpoint_picker
    if chosen is None:
        return None
    name = pickers.name(endpoint.ref.name)
    found = deployment_index.deployment(indexes, endpoint.ref.namespace, name)
    available = int(((found or {}).get("status") or {}).get("availableReplicas") or 0)
    pool = pickers.pool_name(endpoint.ref.name)
    desired = router.replicas(endpoint, context)
    return PickerFacts(pool, name, served, available, desired, chosen.failure_mode.value)


def warm_nodes(endpoint: Endpoint, wkey: str, indexes: Mapping[str, Any]) -> list[str] | None:
    """Nodes labelled ready for the endpoint's weights cache (the router's warmNodes); None without the cache."""
    if not endpoint.weights_enabled:
        return None
    return nodes.ready_labelled(indexes[nodes.NODES_BY_READY_LABEL], nodelabels.weights_ready_label(wkey))


def serving_weights_key(deployment: Mapping[str, Any] | None) -> str | None:
    """The weights key of the generation the Deployment's pod template uses."""
    if deployment is None:
        return None
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    key: str | None = annotations.get(f"{nodelabels.CACHE_PREFIX}/weights-key")
    return key


def deployment_facts(deployment: Mapping[str, Any] | None) -> DeploymentFacts:
    if deployment is None:
        return DeploymentFacts()
    spec, status = deployment.get("spec", {}), deployment.get("status") or {}
    desired = int(spec.get("replicas", 1))
    replicas, updated, available = (
        int(status.get(k, 0) or 0) for k in ("replicas", "updatedReplicas", "availableReplicas")
    )
    current = int(status.get("observedGeneration", 0)) >= int(deployment["metadata"].get("generation", 0))
    failed = next(
        (
            c.get("message")
            for c in status.get("conditions") or []
            if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
        ),
        None,
    )
    rolled_out = current and updated >= desired and replicas == updated and available >= desired
    name = str(deployment["metadata"].get("name", ""))
    return DeploymentFacts(True, desired, replicas, updated, available, current, rolled_out, failed, name)


def placement(endpoint: Endpoint, wkey: str, indexes: Mapping[str, Any]) -> WarmPlacement:
    """Count the endpoint's scheduled pods on weights-warm versus cold nodes."""
    pods = sharing.lookup(
        indexes["endpoint_pods"], (endpoint.ref.namespace, endpoint.label_value, endpoint.ref.kind.lower())
    )
    label = nodelabels.weights_ready_label(wkey)
    warm = cold = 0
    for _pod, node in pods:
        if not node:
            continue
        facts = lookup_node(indexes["node_facts"], node)  # the pods' nodes only, not the fleet's
        if endpoint.weights_enabled and facts is not None and facts.labels.get(label) == nodelabels.READY:
            warm += 1
        else:
            cold += 1
    return WarmPlacement(warm_pods=warm, cold_pods=cold)
