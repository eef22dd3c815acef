"""Endpoint conditions and the HyperPod-compatible `state`, computed from what the controller observed."""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.api.base import Condition, ConditionStatus
from warmstart.api.states import CacheState, ConditionType, EndpointState
from warmstart.api.statuses import CacheSummary
from warmstart.render.conditions import condition
from warmstart.render.gating import Gate


@dataclass(frozen=True)
class DeploymentFacts:
    """What the model Deployment reports."""

    exists: bool = False
    desired: int = 0
    replicas: int = 0
    updated: int = 0
    available: int = 0
    current_generation: bool = False
    rolled_out: bool = False
    failed_message: str | None = None
    name: str = ""


#: the short name of each cache kind, for the `kubectl describe` a condition points to
_SHORT_NAMES = {ConditionType.WEIGHTS_CACHE_READY: "mdcc", ConditionType.IMAGE_CACHE_READY: "mic"}


def _cache_condition(type_: ConditionType, summary: CacheSummary | None, enabled: bool, gen: int) -> Condition:
    if not enabled:
        return condition(type_, True, "CacheDisabled", "caching is not enabled", gen)
    if summary is None or summary.state is None:
        return condition(type_, False, "Pending", "the cache has not reported yet", gen)
    progress = f"{summary.ready_nodes}/{summary.target_nodes} nodes ready"
    text = f"{progress}: {summary.detail}" if summary.detail else progress
    if summary.state == CacheState.READY:
        return condition(type_, True, "Ready", text, gen)
    if summary.name:
        text = f"{text}; per node: kubectl describe {_SHORT_NAMES[type_]} {summary.name}"
    reason = {
        CacheState.FAILED: "Failed",
        CacheState.PARTIALLY_READY: "PartiallyReady",
        CacheState.DOWNLOADING: "Downloading",
    }.get(summary.state, "Pending")
    return condition(type_, False, reason, text, gen)


def conditions(
    generation: int,
    gate: Gate,
    weights: CacheSummary | None,
    weights_enabled: bool,
    image: CacheSummary | None,
    image_enabled: bool,
    deployment: DeploymentFacts,
) -> list[Condition]:
    """Ready, WeightsCacheReady, ImageCacheReady, Progressing and Degraded for one observation."""
    result = [
        _cache_condition(ConditionType.WEIGHTS_CACHE_READY, weights, weights_enabled, generation),
        _cache_condition(ConditionType.IMAGE_CACHE_READY, image, image_enabled, generation),
        condition(
            ConditionType.DEGRADED,
            gate.degraded,
            gate.reason if gate.degraded else "AsExpected",
            gate.message if gate.degraded else "",
            generation,
        ),
    ]
    if deployment.failed_message:
        failed = (
            f"{deployment.failed_message}; kubectl describe deployment {deployment.name} and its pods say why, "
            "a change to the spec rolls out again"
        )
        result.append(condition(ConditionType.PROGRESSING, False, "ProgressDeadlineExceeded", failed, generation))
        result.append(condition(ConditionType.READY, False, "DeploymentFailed", failed, generation))
        return result
    if not deployment.exists:
        result.append(condition(ConditionType.PROGRESSING, True, gate.reason, gate.message, generation))
        result.append(condition(ConditionType.READY, False, gate.reason, gate.message, generation))
        return result
    counts = f"{deployment.available}/{deployment.desired} replicas available, {deployment.updated} updated"
    if not gate.open:
        result.append(
            condition(
                ConditionType.PROGRESSING,
                True,
                gate.reason,
                f"{gate.message}; serving the previous generation ({counts})",
                generation,
            )
        )
    elif not deployment.rolled_out:
        rolling = (
            f"{counts}; waiting for the new model pods to become available: "
            f"kubectl rollout status deployment/{deployment.name}"
        )
        result.append(condition(ConditionType.PROGRESSING, True, "RollingOut", rolling, generation))
    else:
        result.append(condition(ConditionType.PROGRESSING, False, "RolloutComplete", counts, generation))
    ready = deployment.rolled_out and gate.open and deployment.available >= deployment.desired
    result.append(condition(ConditionType.READY, ready, "Serving" if ready else "NotReady", counts, generation))
    return result


@dataclass(frozen=True)
class RouterFacts:
    """Where the endpoint's Service sends clients while routing is switched on or off, and the router's pods."""

    enabled: bool
    via_router: bool
    retiring: bool
    name: str
    available: int = 0
    desired: int = 0


def routing_condition(router: RouterFacts, had: bool, generation: int) -> list[Condition]:
    """``Routing``: whether clients reach the router and what a switch waits for (none while routing was never on)."""
    pods = f"{router.available}/{router.desired} router pods available"
    if router.enabled and router.via_router:
        message = f"the Service sends clients to the router {router.name} ({pods})"
        return [condition(ConditionType.ROUTING, True, "ThroughRouter", message, generation)]
    if router.enabled:
        message = (
            f"the Service sends clients straight to the model pods until a router pod is available ({pods}); "
            f"kubectl describe deployment {router.name} says what it waits for"
        )
        return [condition(ConditionType.ROUTING, False, "RouterStarting", message, generation)]
    if router.retiring:
        message = (
            "routing is off: the Service moves back to the model pods, then the router "
            f"{router.name} is removed (its pods drain open requests first)"
        )
        return [condition(ConditionType.ROUTING, False, "RouterRetiring", message, generation)]
    if had:
        message = "routing is off: the Service sends clients straight to the model pods"
        return [condition(ConditionType.ROUTING, False, "RoutingOff", message, generation)]
    return []


def failed(generation: int, reason: str, message: str) -> list[Condition]:
    """Conditions for an endpoint that cannot proceed until its spec changes (e.g. EULA not accepted)."""
    return [
        condition(ConditionType.RESOLVED, False, reason, message, generation),
        condition(ConditionType.READY, False, reason, message, generation),
        condition(ConditionType.PROGRESSING, False, reason, message, generation),
    ]


def state(conds: list[Condition], deployment: DeploymentFacts) -> EndpointState:
    """The HyperPod `state`, derived from the conditions."""
    by_type = {c.type: c for c in conds}
    ready = by_type.get(ConditionType.READY)
    progressing = by_type.get(ConditionType.PROGRESSING)
    resolved = by_type.get(ConditionType.RESOLVED)
    if resolved is not None and resolved.status == ConditionStatus.FALSE:
        return EndpointState.DEPLOYMENT_FAILED
    if deployment.failed_message:
        return EndpointState.DEPLOYMENT_FAILED
    if ready is not None and ready.status == ConditionStatus.TRUE:
        return EndpointState.DEPLOYMENT_COMPLETE
    if not deployment.exists:
        return EndpointState.DEPLOYMENT_PENDING
    if progressing is not None and progressing.status == ConditionStatus.TRUE:
        return EndpointState.DEPLOYMENT_IN_PROGRESS
    return EndpointState.DEPLOYMENT_IN_PROGRESS


@dataclass(frozen=True)
class PickerFacts:
    """Gateway mode as observed: whether the InferencePool API is served, and the picker's pods."""

    pool: str
    picker: str
    served: bool
    available: int
    desired: int
    failure_mode: str


#: the reason of an endpoint in gateway mode on a cluster without the InferencePool CRD
POOL_CRD_MISSING = "InferencePoolCRDMissing"


def pool_condition(picker: PickerFacts | None, had: bool, generation: int) -> list[Condition]:
    """``InferencePool``: gateway mode's pool and picker; in other modes one that says it is off, once the endpoint
    had one."""
    if picker is None:
        message = "gateway mode is off (intelligentRoutingSpec.endpointPicker is not set or routing is off)"
        return [condition(ConditionType.INFERENCE_POOL, False, "GatewayModeOff", message, generation)] if had else []
    if not picker.served:
        message = (
            "the API server does not serve inference.networking.k8s.io/v1 InferencePool: install the Gateway API "
            "Inference Extension CRDs (or the warmstart chart with gatewayInference.installInferencePoolCRD=true); "
            f"the model pods and the picker {picker.picker} run meanwhile, and the pool follows once the CRD is there"
        )
        return [condition(ConditionType.INFERENCE_POOL, False, POOL_CRD_MISSING, message, generation)]
    pods = f"{picker.available} ready of {picker.desired} picker pods (only the Lease's leader is ready)"
    if picker.available < 1:
        message = (
            f"InferencePool {picker.pool} is applied; no picker pod is ready yet ({pods}), so the gateway applies "
            f"failureMode {picker.failure_mode}: kubectl describe deployment {picker.picker}"
        )
        return [condition(ConditionType.INFERENCE_POOL, False, "PickerStarting", message, generation)]
    message = f"InferencePool {picker.pool} selects the model pods; failureMode {picker.failure_mode}; {pods}"
    return [condition(ConditionType.INFERENCE_POOL, True, "PickerReady", message, generation)]


def through_gateway(picker: PickerFacts, generation: int) -> list[Condition]:
    """``Routing`` in gateway mode: clients come through the user's gateway."""
    message = (
        f"clients reach the model pods through your gateway's HTTPRoute to the InferencePool {picker.pool}, which "
        f"asks the endpoint picker {picker.picker}; the endpoint's own Service goes straight to the model pods"
    )
    return [condition(ConditionType.ROUTING, True, "ThroughGateway", message, generation)]
