"""kopf handlers of ModelDataCacheConfig: one preload Job per target node, node ready labels, status, cleanup.

Level-based: `reconcile` runs on create, update and resume, and from a 1-second timer tick that reconciles a cache
when its Jobs changed in the index, a retry is due, or `memo.settings.resync_seconds` passed (node joins, leaves and
label drift are seen then). Everything is read from two kopf indexes (nodes, and this cache's Jobs), so a reconcile
makes no LIST call; it writes only what changed: Jobs to create or delete, node labels, and status when it differs.
The only reads are one pod LIST per finished Job, to take its termination message, once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf
from pydantic import ValidationError

from warmstart.api import API_VERSION, GROUP, VERSION, nodelabels, preloading
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL, ModelDataCacheConfigSpec, ModelDataCacheConfigStatus
from warmstart.api.states import CacheState, NodeCacheState
from warmstart.controllers import metrics, nodes
from warmstart.controllers.storage import Conflict, Forbidden, Invalid, NotFound, Store, Unavailable
from warmstart.render import jobs as render_jobs
from warmstart.render import keys, labels
from warmstart.render import weights_plans as planning
from warmstart.render.context import RenderContext

log = logging.getLogger(__name__)

IndexKey = tuple[str, str]

TICK_SECONDS = 1.0
#: a label this operator set is trusted for this long even if the node index has not caught up yet
LABEL_GRACE_SECONDS = 60.0
#: the finalizer waits at most this long for cleanup Jobs
CLEANUP_WAIT_SECONDS = 300.0
KIND_LABEL = MDCC_KIND

_states_lock = threading.Lock()
_states: dict[str, str] = {}


@dataclasses.dataclass
class _Memory:
    """Per-cache state of this operator process (kopf gives each object its own memo)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    last_run: float = 0.0
    fingerprint: tuple[Any, ...] = ()
    due: float | None = None
    labelled: dict[str, float] = dataclasses.field(default_factory=dict)
    #: (resourceVersion our last status write was based on, the status written): the watch may not have caught up
    written: tuple[str, ModelDataCacheConfigStatus] | None = None


def _memory(memo: Any) -> _Memory:
    found: _Memory = memo.setdefault("weights_cache", _Memory())
    return found


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class _SilenceTicks(logging.Filter):
    """kopf logs every successful timer run at INFO; the 1-second tick would flood the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and "'tick_weights_cache' succeeded" in record.getMessage())


logging.getLogger("kopf.objects").addFilter(_SilenceTicks())


def _temporary(error: Exception) -> kopf.TemporaryError:
    return kopf.TemporaryError(f"{type(error).__name__}: {error}", delay=5)


def _parents(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec) -> list[dict[str, Any]]:
    """Minimal bodies of the cache's parents, for Events."""
    namespace = body["metadata"]["namespace"]
    return [
        {"apiVersion": p.api_version, "kind": p.kind, "metadata": {"name": p.name, "namespace": namespace, "uid": p.uid}}
        for p in spec.parent_references or []
    ]


def _event(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, type_: str, reason: str, message: str) -> None:
    """An Event on the cache and on each of its parents."""
    targets = [dict(body), *_parents(body, spec)]
    kopf.event(cast(list[kopf.Body], targets), type=type_, reason=reason, message=message[:1024])


def _warn(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, reason: str, message: str) -> None:
    _event(body, spec, "Warning", reason, message)


def _spec(body: Mapping[str, Any]) -> ModelDataCacheConfigSpec:
    try:
        return ModelDataCacheConfigSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        raise kopf.PermanentError(f"invalid spec: {error.errors()[:3]}") from error


def _status(body: Mapping[str, Any]) -> ModelDataCacheConfigStatus:
    try:
        return ModelDataCacheConfigStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return ModelDataCacheConfigStatus()


def _overlay(facts: Iterable[nodes.NodeFacts], label: str, memory: _Memory, clock: float) -> list[nodes.NodeFacts]:
    """Nodes as the index shows them, plus labels this process set in the last minute (the watch may lag)."""
    memory.labelled = {n: t for n, t in memory.labelled.items() if clock - t < LABEL_GRACE_SECONDS}
    result = []
    for node in facts:
        if node.name in memory.labelled and node.labels.get(label) != nodelabels.READY:
            node = dataclasses.replace(node, labels={**node.labels, label: nodelabels.READY})
        result.append(node)
    return result


def _previous_status(body: Mapping[str, Any], memory: _Memory) -> ModelDataCacheConfigStatus:
    """The stored status, or the one this process wrote last if the body still predates that write."""
    if memory.written and memory.written[0] == body["metadata"].get("resourceVersion"):
        return memory.written[1]
    return _status(body)


def _write_status(
    store: Store, body: Mapping[str, Any], old: ModelDataCacheConfigStatus, new: ModelDataCacheConfigStatus, memory: _Memory | None = None
) -> bool:
    """Merge-patch status when it differs; keys that disappeared are nulled."""
    before, after = old.to_api(), new.to_api()
    if before == after:
        return False
    patch: dict[str, Any] = {**{k: None for k in before if k not in after}, **after}
    meta = body["metadata"]
    store.merge_patch(API_VERSION, MDCC_KIND, meta["name"], {"status": patch}, meta["namespace"], subresource="status")
    if memory is not None:
        memory.written = (str(meta.get("resourceVersion")), new)
    return True


def _observe(body: Mapping[str, Any], status: ModelDataCacheConfigStatus) -> None:
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
            metrics.CACHES.labels(kind=KIND_LABEL, state=each.value).set(sum(1 for s in _states.values() if s == each.value))


def _forget(body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    for gauge in (metrics.CACHE_READY_NODES, metrics.CACHE_TARGET_NODES):
        try:
            gauge.remove(KIND_LABEL, meta["namespace"], meta["name"])
        except KeyError:
            pass
    _count_state(meta["uid"], None)


def _report(body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, plan: planning.Plan, old_state: str | None) -> None:
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
        _warn(body, spec, reason, f"preload of {name} on node {entry.node} failed (Job {job.name}): {entry.message or reason}")
    new_state = plan.status.state
    if new_state != old_state and new_state == CacheState.READY:
        _event(body, spec, "Normal", "CacheReady", plan.status.message or "")
    elif new_state != old_state and new_state == CacheState.FAILED:
        reason = next((c.reason for c in plan.status.conditions or [] if c.type == "Ready"), "PreloadFailed")
        _warn(body, spec, reason, plan.status.message or reason)


def retryable_reasons() -> frozenset[str]:
    return frozenset(str(reason) for reason in preloading.RETRYABLE_REASONS)


def permanent_exit_codes() -> list[int]:
    return sorted(preloading.PERMANENT_EXIT_CODES.values())


@kopf.index("batch", "v1", "jobs", labels={labels.MDCC_LABEL: kopf.PRESENT})  # type: ignore[arg-type]
def weights_job_index(body: kopf.Body, namespace: str, meta: Mapping[str, Any], **_: Any) -> dict[IndexKey, render_jobs.IndexedJob]:
    """Preload and cleanup Jobs by (namespace, cache name)."""
    return {(namespace, meta["labels"][labels.MDCC_LABEL]): render_jobs.read_job(body)}


@kopf.index(GROUP, VERSION, MDCC_PLURAL)  # type: ignore[arg-type]
def weights_key_index(spec: Mapping[str, Any], uid: str, namespace: str, name: str, meta: Mapping[str, Any], **_: Any) -> dict[str, tuple[str, str, str]]:
    """Live caches by content key: two namespaces with the same source share node labels and files.

    Returns {} (not None, which kopf would take as "keep the old entry") for caches being deleted.
    """
    try:
        parsed = ModelDataCacheConfigSpec.model_validate(spec)
    except ValidationError:
        return {}
    if meta.get("deletionTimestamp"):
        return {}
    return {keys.weights_key(parsed.model_source_config, parsed.host_path): (namespace, name, uid)}


def _own(index: Mapping[Any, Any], owner: render_jobs.Owner, role: str) -> list[planning.PreloadJob]:
    entries: Iterable[render_jobs.IndexedJob] = index.get((owner.namespace, owner.name), ())
    return sorted((e.job for e in entries if e.role == role and e.owner_uid == owner.uid), key=lambda j: j.name)


def read_results(store: Store, namespace: str, finished: Iterable[planning.PreloadJob]) -> dict[str, planning.PreloadResult]:
    """Termination messages of finished Jobs' pods (one LIST per Job, only until status has recorded it)."""
    codes = {code: str(reason) for code, reason in preloading.REASON_BY_EXIT_CODE.items()}
    found: dict[str, planning.PreloadResult] = {}
    for job in finished:
        pods = store.list("v1", "Pod", namespace, label_selector=f"batch.kubernetes.io/controller-uid={job.uid}")
        result = render_jobs.read_result(pods, codes)
        if result is None:
            reason = "Completed" if job.phase == planning.JobPhase.SUCCEEDED else (job.failure_reason or "JobFailed")
            result = planning.PreloadResult(reason=reason, message="no termination message")
        found[job.name] = result
    return found


def reconcile(
    body: Mapping[str, Any],
    memo: Any,
    node_facts: Mapping[str, Any],
    jobs_index: Mapping[Any, Any],
    *,
    blocking: bool = True,
) -> None:
    """Drive one cache toward: a Job per target node until it is labelled ready, and a truthful status."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return
    memory = _memory(memo)
    if not memory.lock.acquire(blocking=blocking):
        return
    try:
        _reconcile(body, memo.store, memo.settings.render, memory, node_facts, jobs_index)
    except (Unavailable, Conflict, Forbidden) as error:
        raise _temporary(error) from error
    except Invalid as error:
        raise kopf.PermanentError(str(error)) from error
    finally:
        memory.lock.release()


def _reconcile(
    body: Mapping[str, Any],
    store: Store,
    ctx: RenderContext,
    memory: _Memory,
    node_facts: Mapping[str, Any],
    jobs_index: Mapping[Any, Any],
) -> None:
    meta = body["metadata"]
    spec = _spec(body)
    old = _previous_status(body, memory)
    key = keys.weights_key(spec.model_source_config, spec.host_path)
    owner = render_jobs.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    generation = int(meta.get("generation") or 1)
    own_jobs = _own(jobs_index, owner, render_jobs.ROLE_PRELOAD)
    clock = time.monotonic()
    live = _overlay(nodes.all_nodes(node_facts), nodelabels.weights_ready_label(key), memory, clock)
    results = read_results(store, owner.namespace, planning.unrecorded(own_jobs, old))
    observed = planning.Observed(
        generation=generation, key=key, spec=spec, status=old, nodes=live, jobs=own_jobs, results=results,
        retryable_reasons=retryable_reasons(),
    )
    plan = planning.plan(observed, _now())
    for name in plan.delete:
        store.delete("batch/v1", "Job", name, owner.namespace)
    size = planning.model_size(spec, plan.status)
    for node, attempt in plan.create:
        request = render_jobs.PreloadRequest(owner=owner, key=key, node=node, attempt=attempt, generation=generation, expected_bytes=size)
        try:
            store.apply(render_jobs.preload_job(request, spec, ctx, permanent_exit_codes()))
        except Invalid as error:  # e.g. the Job exists with an older template the index has not shown yet
            log.warning("cache %s/%s: preload Job for node %s not applied: %s", owner.namespace, owner.name, node, error)
    for node in plan.label:
        try:
            store.merge_patch("v1", "Node", node, {"metadata": {"labels": {nodelabels.weights_ready_label(key): nodelabels.READY}}})
        except NotFound:
            continue  # the node left; the next reconcile drops it
        memory.labelled[node] = time.monotonic()
    _write_status(store, body, old, plan.status, memory)
    _report(body, spec, plan, str(old.state) if old.state else None)
    _observe(body, plan.status)
    memory.last_run = clock
    memory.fingerprint = tuple(own_jobs)
    memory.due = clock + plan.requeue_after if plan.requeue_after else None
    if plan.create or plan.delete or plan.label:
        log.info("cache %s/%s: created %d Jobs, deleted %d, labelled %d nodes; %s", owner.namespace, owner.name,
                 len(plan.create), len(plan.delete), len(plan.label), plan.status.message)


@kopf.on.create(GROUP, VERSION, MDCC_PLURAL)
@kopf.on.update(GROUP, VERSION, MDCC_PLURAL)
@kopf.on.resume(GROUP, VERSION, MDCC_PLURAL)  # type: ignore[arg-type]
def reconcile_weights_cache(body: kopf.Body, memo: kopf.Memo, node_facts: kopf.Index[Any, Any], weights_job_index: kopf.Index[Any, Any], **_: Any) -> None:
    """Create, update and resume: reconcile now."""
    reconcile(body, memo, node_facts, weights_job_index)


@kopf.timer(GROUP, VERSION, MDCC_PLURAL, interval=TICK_SECONDS)  # type: ignore[arg-type]
def tick_weights_cache(body: kopf.Body, memo: kopf.Memo, node_facts: kopf.Index[Any, Any], weights_job_index: kopf.Index[Any, Any], **_: Any) -> None:
    """Reconcile when this cache's Jobs changed, a retry is due, or the resync interval passed."""
    memory = _memory(memo)
    clock = time.monotonic()
    owner = render_jobs.Owner(name=body["metadata"]["name"], namespace=body["metadata"]["namespace"], uid=body["metadata"]["uid"])
    changed = tuple(_own(weights_job_index, owner, render_jobs.ROLE_PRELOAD)) != memory.fingerprint
    due = memory.due is not None and clock >= memory.due
    stale = clock - memory.last_run >= memo.settings.resync_seconds
    if changed or due or stale:
        reconcile(body, memo, node_facts, weights_job_index, blocking=False)


def finalize(
    body: Mapping[str, Any],
    store: Store,
    ctx: RenderContext,
    node_facts: Mapping[str, Any],
    jobs_index: Mapping[Any, Any],
    keys_index: Mapping[Any, Any],
    now: dt.datetime,
) -> None:
    """Stop preloads, run cleanup Jobs on the nodes that may hold files, wait (bounded), then remove the labels."""
    meta = body["metadata"]
    try:
        spec = ModelDataCacheConfigSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return  # nothing was ever created for it
    key = keys.weights_key(spec.model_source_config, spec.host_path)
    owner = render_jobs.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    sharers = [entry for entry in keys_index.get(key, ()) if entry[2] != owner.uid]
    if sharers:
        log.info("cache %s/%s: key %s is also used by %s; keeping files and labels", owner.namespace, owner.name, key, sharers[0][:2])
        return
    label = nodelabels.weights_ready_label(key)
    old = _status(body)
    live = {n.name: n for n in nodes.all_nodes(node_facts)}
    preloads = _own(jobs_index, owner, render_jobs.ROLE_PRELOAD)
    cleanups = {j.node: j for j in _own(jobs_index, owner, render_jobs.ROLE_CLEANUP)}
    touched = {n.name for n in live.values() if n.labels.get(label) == nodelabels.READY}
    touched |= {j.node for j in preloads} | {n.node for n in old.nodes or [] if n.attempts}
    holders = sorted(n for n in touched if n in live)
    message = f"removing the cache from {len(holders)} nodes"
    _write_status(store, body, old, planning.deleting(old, int(meta.get("generation") or 1), message, now))
    for job in preloads:
        if job.phase == planning.JobPhase.RUNNING:
            store.delete("batch/v1", "Job", job.name, owner.namespace)
    started = render_jobs.parse_time(meta.get("deletionTimestamp")) or now
    if (now - started).total_seconds() < CLEANUP_WAIT_SECONDS:
        for node in holders:
            if node not in cleanups:
                store.apply(render_jobs.cleanup_job(owner, key, node, spec, ctx))
        pending = [n for n in holders if n not in cleanups or cleanups[n].phase == planning.JobPhase.RUNNING]
        if pending:
            raise kopf.TemporaryError(f"waiting for cleanup Jobs on {len(pending)} nodes ({pending[0]}, ...)", delay=2)
    else:
        log.warning("cache %s/%s: cleanup did not finish within %.0f s; releasing", owner.namespace, owner.name, CLEANUP_WAIT_SECONDS)
    failed = sorted(n for n, j in cleanups.items() if j.phase == planning.JobPhase.FAILED and n in live)
    if failed:
        _warn(body, spec, "CleanupFailed", f"cleanup Job failed on {len(failed)} nodes ({', '.join(failed[:5])}); files may remain")
    for name, facts in live.items():
        if label in facts.labels:
            with contextlib.suppress(NotFound):
                store.merge_patch("v1", "Node", name, {"metadata": {"labels": {label: None}}})
    for job in cleanups.values():
        if job.phase != planning.JobPhase.RUNNING:
            store.delete("batch/v1", "Job", job.name, owner.namespace)


@kopf.on.delete(GROUP, VERSION, MDCC_PLURAL)  # type: ignore[arg-type]
def delete_weights_cache(
    body: kopf.Body,
    memo: kopf.Memo,
    node_facts: kopf.Index[Any, Any],
    weights_job_index: kopf.Index[Any, Any],
    weights_key_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Finalizer: remove the files (cleanup Jobs on the nodes that hold them), then the node labels."""
    memory = _memory(memo)
    with memory.lock:
        try:
            finalize(body, memo.store, memo.settings.render, node_facts, weights_job_index, weights_key_index, _now())
        except (Unavailable, Conflict, Forbidden) as error:
            raise _temporary(error) from error
    _forget(body)
