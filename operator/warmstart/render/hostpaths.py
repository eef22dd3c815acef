"""Confine cache roots: a weights cache's `hostPath` must be exactly one of the roots the cluster admin allows.

The chart's ValidatingAdmissionPolicy applies the same rule at admission (charts/warmstart/templates/admission.yaml);
the operator applies it again, so a CR that got past admission (policy not installed, or created before the roots
changed) still never mounts another node directory. Equal, not "under": a root below an allowed one could be another
cache's own directory (`<root>/warmstart/keys/<key>`), whose files would then be mounted writable. The operator
normalizes both sides (repeated and trailing `/`) and refuses `.` and `..` segments outright.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from warmstart.api.caches import ModelDataCacheConfigStatus
from warmstart.api.states import CacheState, ConditionType
from warmstart.render import conditions

#: the status reason of a refused cache root, on the endpoint and on the cache
REASON = "HostPathNotAllowed"


def normalized(path: str) -> str | None:
    """`path` absolute with single `/` separators and no trailing `/`; None if it is relative or has `.`/`..`."""
    if not path.startswith("/") or "\0" in path:
        return None
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return None
    return "/" + "/".join(parts)


def allowed(host_path: str, roots: Sequence[str]) -> bool:
    """Whether `host_path` is one of the allowed roots (after normalizing both)."""
    path = normalized(host_path)
    return path is not None and path in {normalized(root) for root in roots}


def refusal(host_path: str, roots: Sequence[str]) -> str | None:
    """Why `host_path` is refused (None when allowed)."""
    if allowed(host_path, roots):
        return None
    why = " (it has '.' or '..' segments)" if normalized(host_path) is None else ""
    return (
        f"hostPath {host_path} is not an allowed cache root{why} (a cache root must equal an allowed root, not lie "
        f"under it); allowed: {', '.join(roots) or '(none)'} (Helm value cache.allowedHostPaths)"
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
