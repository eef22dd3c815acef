"""A weights cache's status from its planned node entries: state, counts, message, NVMe use and the Ready condition."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import CacheState, ConditionType, NodeCacheState
from warmstart.render import conditions, nvme_budget
from warmstart.render.weights_observations import (
    LAST_USED_REFRESH,
    QUEUED,
    NodeLike,
    Observed,
    clip,
    is_permanent_failure,
)


def with_usage(
    observed: Observed,
    targets: Sequence[NodeLike],
    entries: list[NodeCacheStatus],
    evict: Sequence[tuple[str, nvme_budget.Resident]],
    size: int | None,
) -> list[NodeCacheStatus]:
    """Each node entry with the NVMe bytes the known caches use there (this one, when it holds or fills the node)."""
    holding = (NodeCacheState.READY, NodeCacheState.DOWNLOADING, NodeCacheState.PENDING)
    nodes = {n.name: n for n in targets}
    leaving = {(node, victim.key) for node, victim in evict}
    updated = []
    for entry in entries:
        node = nodes[entry.node]
        others = [r for r in observed.residents.get(entry.node, ()) if (entry.node, r.key) not in leaving]
        own = size or 0 if entry.state in holding and entry.reason != QUEUED else 0
        capacity = placement.nvme_capacity_bytes(node.labels.get(nodelabels.INSTANCE_TYPE), node.annotations)
        used, free = nvme_budget.node_usage(own, others, capacity)
        if used or free is not None:
            entry = entry.model_copy(update={"nvme_used_bytes": used, "nvme_free_bytes": free})
        updated.append(entry)
    return updated


def last_used(observed: Observed, now: dt.datetime) -> str:
    """status.lastUsedTime: refreshed (hourly) while an endpoint references the cache, frozen once none does."""
    stored = observed.status.last_used_time
    if not observed.spec.parent_references:
        return stored or timestamp(now)
    try:
        stamped = dt.datetime.fromisoformat(stored.replace("Z", "+00:00")) if stored else None
        fresh = stamped is not None and now - stamped < LAST_USED_REFRESH
    except ValueError:
        fresh = False
    return stored if fresh and stored else timestamp(now)


def summarize(
    observed: Observed,
    entries: list[NodeCacheStatus],
    measured: int | None,
    size: int | None,
    now: dt.datetime,
    unavailable: int = 0,
) -> ModelDataCacheConfigStatus:
    """The cache's status from its nodes: state, counts, bytes, message and the Ready condition.

    `unavailable`: matching nodes left out of the targets (named in the message, never counted).
    """
    ready = [e for e in entries if e.state == NodeCacheState.READY]
    failed = [e for e in entries if is_permanent_failure(e, observed.retryable_reasons)]
    busy = any(e.state in (NodeCacheState.DOWNLOADING, NodeCacheState.FAILED) for e in entries) or bool(ready)
    total = len(entries)
    if total == 0:
        state, reason, message = CacheState.PENDING, "NoTargetNodes", "no live node matches the cache's node targeting"
    elif failed:
        first = failed[0]
        state, reason = CacheState.FAILED, first.reason or "PreloadFailed"
        details = "; ".join(f"{e.node}: {e.reason}: {e.message or ''}".rstrip(": ") for e in failed[:3])
        message = f"{len(failed)} of {total} nodes failed: {details}"
    elif len(ready) == total:
        state, reason, message = CacheState.READY, "CacheReady", f"{total}/{total} nodes ready"
    elif busy:
        warming = [e.node for e in entries if e.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING)]
        more = f" (+{len(warming) - 3} more)" if len(warming) > 3 else ""
        state, reason = CacheState.DOWNLOADING, "Downloading"
        message = f"{len(ready)}/{total} nodes ready" + (f"; warming {', '.join(warming[:3])}{more}" if warming else "")
    else:
        state, reason, message = (
            CacheState.PENDING,
            "Pending",
            f"{len(ready)}/{total} nodes ready; preload Jobs starting",
        )
    if unavailable:
        message += f"; {unavailable} matching nodes unavailable (not counted)"
    message = clip(message) or message
    ready_condition = conditions.condition(
        ConditionType.READY, state == CacheState.READY, reason, message, observed.generation
    )
    done = sum((size or e.bytes or 0) for e in ready) if ready else 0
    return ModelDataCacheConfigStatus(
        state=state,
        ready_nodes=len(ready),
        target_nodes=total,
        message=message,
        conditions=conditions.set_condition(observed.status.conditions or [], ready_condition, timestamp(now)),
        observed_generation=observed.generation,
        key=observed.key,
        bytes_done=done,
        bytes_total=size * total if size else None,
        model_size_bytes=measured,
        nodes=entries or None,
    )


def deleting(
    status: ModelDataCacheConfigStatus, generation: int, message: str, now: dt.datetime
) -> ModelDataCacheConfigStatus:
    """Status while the finalizer cleans the nodes."""
    ready_condition = conditions.condition(ConditionType.READY, False, "Deleting", message, generation)
    return status.model_copy(
        update={
            "state": CacheState.DELETING,
            "message": message,
            "conditions": conditions.set_condition(status.conditions or [], ready_condition, timestamp(now)),
        }
    )


def timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: a node whose step (label, Job, eviction) the API server refused: it is not ready, whatever its Job said
NODE_STEP_FAILED = "NodeStepFailed"


def with_failed_steps(
    observed: Observed, status: ModelDataCacheConfigStatus, failed: Mapping[str, str], now: dt.datetime
) -> ModelDataCacheConfigStatus:
    """`status` with each node of `failed` (node -> why) marked NodeStepFailed, never ready, and the counts and state
    to match. A node planned as ready whose label write was refused has no label: status must not count it."""
    if not failed:
        return status
    entries = [
        e.model_copy(
            update={
                "state": NodeCacheState.DOWNLOADING if e.state == NodeCacheState.READY else e.state,
                "reason": NODE_STEP_FAILED,
                "message": failed[e.node],
            }
        )
        if e.node in failed
        else e
        for e in status.nodes or []
    ]
    size = observed.spec.model_size_bytes or status.model_size_bytes
    redone = summarize(observed, entries, status.model_size_bytes, size, now, len(status.unavailable_nodes or []))
    kept = ("unavailable_nodes", "queued_nodes", "preload_concurrency", "last_used_time")
    return redone.model_copy(update={field: getattr(status, field) for field in kept})
