"""The deployment gate: create or roll the Deployment only when the weights cache is ready on every target node.

Policy: while the cache fills, the endpoint waits (DeploymentPending, or keeps serving the previous generation on an
update). After `maxDeployTimeInSeconds` it proceeds anyway with Degraded=True. What a pod on a cold node then does
depends on the cache access: with `hostPath` its init container downloads the weights (slower, not a failure); with
`csi` its cache volume waits until the operator's preload Job has filled that node. A cache that failed permanently
opens the gate at once with the same Degraded condition, because waiting cannot help.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.api.states import CacheState
from warmstart.api.statuses import CacheSummary
from warmstart.render.cache_volumes import CacheAccess

#: what a pod on a node without the weights does, per cache access
COLD_PODS = {
    CacheAccess.HOST_PATH: "pods on cold nodes download at start",
    CacheAccess.CSI: "pods on cold nodes wait until the operator's preload Job has filled their node (their cache "
    "volume mounts then)",
}
#: the same, when the cache failed permanently
FAILED_PODS = {
    CacheAccess.HOST_PATH: "deploying without it: pods download at start",
    CacheAccess.CSI: "deploying anyway: pods on cold nodes wait for their node's preload, which fails the same way "
    "until the model source is fixed",
}


@dataclass(frozen=True)
class Gate:
    """Whether the current cache generation may be deployed, and why."""

    open: bool
    reason: str
    message: str
    degraded: bool = False


def decide(
    weights_enabled: bool,
    weights: CacheSummary | None,
    waited_seconds: float,
    max_wait_seconds: int,
    deadline: str | None = None,
    *,
    access: CacheAccess = CacheAccess.HOST_PATH,
) -> Gate:
    """Decide from the weights cache summary and how long this generation has waited.

    While it waits, the message names what it waits for, how far it got and what the user can do; `deadline` (the
    time the wait ends, as a timestamp) keeps the message the same on every pass, so waiting writes no new status.
    `access` (the operator's cache access) says what pods on cold nodes do once the gate opens degraded.
    """
    if not weights_enabled:
        return Gate(True, "CacheDisabled", "weights caching is off: pods download at start")
    cache = weights.name if weights is not None and weights.name else None
    see = f"; per node: kubectl describe mdcc {cache}" if cache else ""
    ends = f"maxDeployTimeInSeconds={max_wait_seconds}" + (f", at {deadline}" if deadline else "")
    if weights is None or weights.state is None:
        return _waiting(
            waited_seconds,
            max_wait_seconds,
            access,
            "the weights cache has not reported yet",
            f"it deploys once the weights are on every target node, or after {ends}",
        )
    progress = f"{weights.ready_nodes}/{weights.target_nodes} target nodes ready"
    detail = f"; {weights.detail}" if weights.detail else ""
    if weights.state == CacheState.READY and weights.target_nodes > 0 and weights.ready_nodes >= weights.target_nodes:
        return Gate(True, "WeightsCacheReady", f"weights cached on all target nodes ({progress})")
    if weights.state == CacheState.FAILED:
        return Gate(
            True,
            "WeightsCacheFailed",
            f"weights cache failed ({progress}{detail}); {FAILED_PODS[access]}; "
            f"fix the model source in the spec to retry{see}",
            degraded=True,
        )
    if weights.target_nodes == 0:
        return _waiting(
            waited_seconds,
            max_wait_seconds,
            access,
            "no node matches the endpoint's instance types yet",
            f"add nodes of those instance types or change instanceType; it deploys anyway after {ends}",
        )
    return _waiting(
        waited_seconds,
        max_wait_seconds,
        access,
        f"preloading weights: {progress}{detail}",
        f"it deploys once every target node is ready, or after {ends}{see}",
    )


def _waiting(waited: float, limit: int, access: CacheAccess, message: str, action: str) -> Gate:
    if waited >= limit:
        return Gate(
            True,
            "MaxDeployTimeExceeded",
            f"waited {int(waited)}s (maxDeployTimeInSeconds={limit}) for the weights cache; deploying anyway, "
            f"{COLD_PODS[access]} ({message})",
            degraded=True,
        )
    return Gate(False, "WaitingForWeightsCache", f"{message}; {action}")
