"""Name the fields an endpoint sets that warmstart accepts but does not act on, so a condition can say so.

What warmstart does act on (and so never names here): the source, worker, targeting, replicas, caches, the
`kubernetes` block, `metrics`, `intelligentRoutingSpec`, `loadBalancer` (see `_load_balancer`), `environmentVariables`,
`maxDeployTimeInSeconds`, `prefetchEnabled` (the node cache is the prefetch), and for a JumpStartModel the model
reference, `gatedModelDownloadRole` and `acceleratorPartitionType` (render/endpoints.py).
"""

from __future__ import annotations

from typing import Any

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import PUBLIC_HUB, JumpStartModelSpec
from warmstart.api.strategies import RoutingStrategy

#: top-level spec fields (by API name) that are accepted for compatibility only
_IGNORED = (
    "tlsConfig",
    "dnsConfig",
    "dataCapture",
    "pdSpec",
    "kvCacheSpec",
    "sageMakerEndpoint",
    "endpointName",
    "tags",
    "InitialReplicaCount",
    "modelVersion",
)
DEFAULT_INVOCATION_ENDPOINT = "invocations"
#: fields no code needs to read, because warmstart only ever does what one value asks for: at that value they are
#: acted on, at any other they are named below
ONLY_VALUE = {"spec.model.modelHubName": PUBLIC_HUB}

#: spec paths (API spelling, below `spec.`) that warmstart does not act on, or only for some values: the API
#: reference page (render/api_reference.py) says so for each, as the condition does when one is set
NOT_ACTED_ON: dict[str, str] = {
    **{name: "no" for name in _IGNORED},
    "invocationEndpoint": f"partly: only `{DEFAULT_INVOCATION_ENDPOINT}`; the router and Service pass every path",
    "loadBalancer.routingAlgorithm": "partly: not when intelligentRoutingSpec sets the routing",
    "loadBalancer.healthCheckPath": "partly: not when worker.probes.readinessProbe is set",
    "intelligentRoutingSpec.autoScalingSpec": "partly: not when spec.autoScalingSpec is set",
    "intelligentRoutingSpec.routingStrategy": "partly: `kvaware` is served as `prefixaware`",
    "model.modelHubName": f"partly: only `{PUBLIC_HUB}` is read",
    **{
        f"{where}.{field}": f"partly: the router enforces it; not under intelligentRoutingSpec.enabled false{extra}"
        for where in ("worker.requestLimits", "requestLimits")
        for field, extra in (
            ("maxConcurrentRequests", ""),
            ("maxQueueSize", ", nor without maxConcurrentRequests"),
            ("overflowStatusCode", ", nor without maxConcurrentRequests"),
        )
    },
    "model.additionalConfigs": "no",
    "server.executionRole": "no: pods use their service account",
    "server.validations": "no",
}


def _set(value: Any) -> bool:
    return value not in (None, {}, [], "")


def _load_balancer(spec: InferenceEndpointConfigSpec | JumpStartModelSpec) -> list[str]:
    """routingAlgorithm is the router's strategy unless intelligentRoutingSpec sets one; healthCheckPath is the
    readiness probe unless the worker has its own."""
    found = []
    balancer = spec.load_balancer
    if balancer and balancer.routing_algorithm and spec.intelligent_routing_spec is not None:
        found.append("spec.loadBalancer.routingAlgorithm (intelligentRoutingSpec decides the routing)")
    probes = spec.worker.probes if isinstance(spec, InferenceEndpointConfigSpec) else None
    if balancer and balancer.health_check_path and probes and probes.readiness_probe:
        found.append("spec.loadBalancer.healthCheckPath (worker.probes.readinessProbe is used)")
    return found


def _request_limits(spec: InferenceEndpointConfigSpec | JumpStartModelSpec) -> list[str]:
    """The router enforces the limits (render/endpoints.py routing_of): none without it, and a queue and an overflow
    status only behind a concurrency cap."""
    if isinstance(spec, InferenceEndpointConfigSpec):
        limits, where = spec.worker.request_limits, "spec.worker.requestLimits"
    else:
        limits, where = spec.request_limits, "spec.requestLimits"
    if limits is None:
        return []
    routing = spec.intelligent_routing_spec
    if routing is not None and not routing.enabled:
        named = [
            f for f in ("maxConcurrentRequests", "maxQueueSize", "overflowStatusCode") if _set(limits.to_api().get(f))
        ]
        return [f"{where}.{f} (intelligentRoutingSpec.enabled is false: no router enforces it)" for f in named]
    if limits.max_concurrent_requests is None:
        named = [f for f in ("maxQueueSize", "overflowStatusCode") if _set(limits.to_api().get(f))]
        return [f"{where}.{f} (no effect without maxConcurrentRequests)" for f in named]
    return []


def _jumpstart(spec: JumpStartModelSpec) -> list[str]:
    found = []
    if spec.model.model_hub_name and spec.model.model_hub_name != PUBLIC_HUB:
        found.append(f"spec.model.modelHubName (only {PUBLIC_HUB} is read)")
    if spec.model.additional_configs:
        found.append("spec.model.additionalConfigs")
    if spec.server.execution_role:
        found.append("spec.server.executionRole (pods use their service account)")
    if spec.server.validations:
        found.append("spec.server.validations")
    return found


def unsupported_fields(spec: InferenceEndpointConfigSpec | JumpStartModelSpec) -> list[str]:
    """Paths of set-but-unimplemented fields, in API spelling, e.g. ['spec.tlsConfig']."""
    data = spec.to_api()
    found = [f"spec.{name}" for name in _IGNORED if _set(data.get(name))]
    found += _load_balancer(spec)
    found += _request_limits(spec)
    if data.get("invocationEndpoint", DEFAULT_INVOCATION_ENDPOINT) != DEFAULT_INVOCATION_ENDPOINT:
        found.append("spec.invocationEndpoint (the router and Service pass every path through)")
    routing = spec.intelligent_routing_spec
    if routing and routing.auto_scaling_spec and spec.auto_scaling_spec:
        found.append("spec.intelligentRoutingSpec.autoScalingSpec (spec.autoScalingSpec is used)")
    if routing and routing.enabled and routing.routing_strategy == RoutingStrategy.KVAWARE:
        found.append("spec.intelligentRoutingSpec.routingStrategy=kvaware (served as prefixaware)")
    if isinstance(spec, JumpStartModelSpec):
        found += _jumpstart(spec)
    return found
