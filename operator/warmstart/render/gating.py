"""The deployment gate: create or roll the Deployment only when the weights cache is ready on every target node.

Policy: while the cache fills, the endpoint waits (DeploymentPending, or keeps serving the previous generation on an
update). After `maxDeployTimeInSeconds` it proceeds anyway with Degraded=True: pods start through the init container's
normal download, which is slower, not a failure. A cache that failed permanently opens the gate at once with the same
Degraded condition, because waiting cannot help.
"""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.api.states import CacheState
from warmstart.api.statuses import CacheSummary


@dataclass(frozen=True)
class Gate:
    """Whether the current cache generation may be deployed, and why."""

    open: bool
    reason: str
    message: str
    degraded: bool = False


def decide(weights_enabled: bool, weights: CacheSummary | None, waited_seconds: float, max_wait_seconds: int) -> Gate:
    """Decide from the weights cache summary and how long this generation has waited."""
    if not weights_enabled:
        return Gate(True, "CacheDisabled", "weights caching is off: pods download at start")
    if weights is None or weights.state is None:
        return _waiting(waited_seconds, max_wait_seconds, "the weights cache has not reported yet")
    progress = f"{weights.ready_nodes}/{weights.target_nodes} target nodes ready"
    if weights.state == CacheState.READY and weights.target_nodes > 0 and weights.ready_nodes >= weights.target_nodes:
        return Gate(True, "WeightsCacheReady", f"weights cached on all target nodes ({progress})")
    if weights.state == CacheState.FAILED:
        return Gate(
            True,
            "WeightsCacheFailed",
            f"weights cache failed ({weights.message or progress}); deploying without it: pods download at start",
            degraded=True,
        )
    if weights.target_nodes == 0:
        return _waiting(waited_seconds, max_wait_seconds, "no node matches the endpoint's instance types yet")
    return _waiting(
        waited_seconds,
        max_wait_seconds,
        f"preloading weights: {progress}" + (f"; {weights.message}" if weights.message else ""),
    )


def _waiting(waited: float, limit: int, message: str) -> Gate:
    if waited >= limit:
        return Gate(
            True,
            "MaxDeployTimeExceeded",
            f"waited {int(waited)}s (maxDeployTimeInSeconds={limit}) for the weights cache; deploying anyway, "
            f"pods on cold nodes download at start ({message})",
            degraded=True,
        )
    return Gate(False, "WaitingForWeightsCache", message)
