"""Confine cache roots: a weights cache's `hostPath` must be one of the roots the cluster admin allows, or under one.

The chart's ValidatingAdmissionPolicy applies the same rule at admission (charts/warmstart/templates/admission.yaml);
the operator applies it again, so a CR that got past admission (policy not installed, or created before the roots
changed) still never mounts another node directory. Plain string rules, the same in CEL and here: the path equals a
root or starts with `<root>/` (the CRD already refuses relative paths and `..` segments).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from warmstart.api.caches import ModelDataCacheConfigStatus
from warmstart.api.states import CacheState, ConditionType
from warmstart.render import conditions

#: the status reason of a refused cache root, on the endpoint and on the cache
REASON = "HostPathNotAllowed"


def allowed(host_path: str, roots: Sequence[str]) -> bool:
    """Whether `host_path` is an allowed root or lies under one."""
    return any(host_path == root or host_path.startswith(root.rstrip("/") + "/") for root in roots)


def refusal(host_path: str, roots: Sequence[str]) -> str | None:
    """Why `host_path` is refused (None when allowed)."""
    if allowed(host_path, roots):
        return None
    return (
        f"hostPath {host_path} is not an allowed cache root; allowed: {', '.join(roots) or '(none)'}"
        " (Helm value cache.allowedHostPaths)"
    )


def refused_status(
    old: ModelDataCacheConfigStatus, generation: int, message: str, now: dt.datetime
) -> ModelDataCacheConfigStatus:
    """The status of a weights cache whose root is refused: Failed, no node touched."""
    ready = conditions.condition(ConditionType.READY, False, REASON, message, generation)
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ModelDataCacheConfigStatus(
        state=CacheState.FAILED,
        message=message,
        conditions=conditions.set_condition(old.conditions or [], ready, stamp),
        observed_generation=generation,
    )
