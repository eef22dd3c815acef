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


def _cache_condition(type_: ConditionType, summary: CacheSummary | None, enabled: bool, gen: int) -> Condition:
    if not enabled:
        return condition(type_, True, "CacheDisabled", "caching is not enabled", gen)
    if summary is None or summary.state is None:
        return condition(type_, False, "Pending", "the cache has not reported yet", gen)
    progress = f"{summary.ready_nodes}/{summary.target_nodes} nodes ready"
    text = f"{progress}: {summary.message}" if summary.message else progress
    if summary.state == CacheState.READY:
        return condition(type_, True, "Ready", text, gen)
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
        result.append(
            condition(
                ConditionType.PROGRESSING, False, "ProgressDeadlineExceeded", deployment.failed_message, generation
            )
        )
        result.append(condition(ConditionType.READY, False, "DeploymentFailed", deployment.failed_message, generation))
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
        result.append(condition(ConditionType.PROGRESSING, True, "RollingOut", counts, generation))
    else:
        result.append(condition(ConditionType.PROGRESSING, False, "RolloutComplete", counts, generation))
    ready = deployment.rolled_out and gate.open and deployment.available >= deployment.desired
    result.append(condition(ConditionType.READY, ready, "Serving" if ready else "NotReady", counts, generation))
    return result


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
