"""What weights caches report besides their status: Prometheus metrics, and Events on the cache and its parents."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any, cast

import kopf

from warmstart.api.caches import (
    MDCC_KIND,
    ModelDataCacheConfigSpec,
    ModelDataCacheConfigStatus,
)
from warmstart.api.states import CacheState, NodeCacheState
from warmstart.controllers import metrics
from warmstart.render import weights_plans as planning

KIND_LABEL = MDCC_KIND

_states_lock = threading.Lock()
_states: dict[str, str] = {}


def _parents(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec) -> list[dict[str, Any]]:
    """Minimal bodies of the cache's parents, for Events."""
    namespace = body["metadata"]["namespace"]
    return [
        {
            "apiVersion": p.api_version,
            "kind": p.kind,
            "metadata": {"name": p.name, "namespace": namespace, "uid": p.uid},
        }
        for p in spec.parent_references or []
    ]


def event(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, type_: str, reason: str, message: str) -> None:
    """An Event on the cache and on each of its parents."""
    targets = [dict(body), *_parents(body, spec)]
    kopf.event(cast(list[kopf.Body], targets), type=type_, reason=reason, message=message[:1024])


def warn(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, reason: str, message: str) -> None:
    event(body, spec, "Warning", reason, message)


def observe(body: Mapping[str, Any], status: ModelDataCacheConfigStatus) -> None:
    """Export the cache's node counts and state."""
    meta = body["metadata"]
    gauge = {"kind": KIND_LABEL, "namespace": meta["namespace"], "name": meta["name"]}
    metrics.CACHE_READY_NODES.labels(**gauge).set(status.ready_nodes)
    metrics.CACHE_TARGET_NODES.labels(**gauge).set(status.target_nodes)
    _count_state(meta["uid"], str(status.state) if status.state else None)


def _count_state(uid: str, state: str | None) -> None:
    with _states_lock:
        if state is None:
            _states.pop(uid, None)
        else:
            _states[uid] = state
        for each in CacheState:
            metrics.CACHES.labels(kind=KIND_LABEL, state=each.value).set(
                sum(1 for s in _states.values() if s == each.value)
            )


def forget(body: Mapping[str, Any]) -> None:
    """Drop a deleted cache's series."""
    meta = body["metadata"]
    for gauge in (metrics.CACHE_READY_NODES, metrics.CACHE_TARGET_NODES):
        with contextlib.suppress(KeyError):
            gauge.remove(KIND_LABEL, meta["namespace"], meta["name"])
    _count_state(meta["uid"], None)


def report(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, plan: planning.Plan, old_state: str | None) -> None:
    """Metrics and Events for outcomes recorded in this reconcile."""
    name = body["metadata"]["name"]
    for entry, job in plan.recorded:
        if entry.state == NodeCacheState.READY:
            if entry.bytes:
                metrics.BYTES_PRELOADED.labels(namespace=body["metadata"]["namespace"], name=name).inc(entry.bytes)
            if entry.seconds is not None:
                metrics.PRELOAD_SECONDS.observe(entry.seconds)
            continue
        reason = entry.reason or "PreloadFailed"
        metrics.PRELOAD_FAILURES.labels(reason=reason).inc()
        warn(
            body,
            spec,
            reason,
            f"preload of {name} on node {entry.node} failed (Job {job.name}): {entry.message or reason}",
        )
    new_state = plan.status.state
    if new_state != old_state and new_state == CacheState.READY:
        event(body, spec, "Normal", "CacheReady", plan.status.message or "")
    elif new_state != old_state and new_state == CacheState.FAILED:
        reason = next((c.reason for c in plan.status.conditions or [] if c.type == "Ready"), "PreloadFailed")
        warn(body, spec, reason, plan.status.message or reason)
