"""Plan a weights cache from what is observed: per-node state, the Jobs to create or delete, the labels to set, status.

Pure: the controller passes in the nodes and Jobs from its kopf indexes, the termination messages it read, and `now`.
Rules (docs/weights-cache.md has them for users):
- a node holding the ready label is Ready; the label is the truth, whatever happened to its Job;
- a node that cannot hold the model (known size vs NVMe capacity) is Failed/InsufficientCapacity and gets no Job;
- every other target node has exactly one current Job, `attempt` numbered; older attempts are deleted;
- a succeeded Job labels its node; if the label disappears after that was recorded, the node is preloaded again
  (`--if-missing` makes that seconds when the files are still there), so a label is never set without a fresh check;
- a failed Job is retried when its reason is retryable (exponential backoff from the Job's end, at most
  MAX_ATTEMPTS), or at once when the spec changed since it was created; otherwise the node stays Failed;
- Jobs on nodes that left the target set are deleted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import CacheState, ConditionType, NodeCacheState
from warmstart.render import conditions, tolerations

RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0
MAX_ATTEMPTS = 5
MESSAGE_LIMIT = 1024
RETRY_SEPARATOR = "; retry "

INSUFFICIENT_CAPACITY = "InsufficientCapacity"
#: Job conditions without a termination message that are worth a retry (a crash, OOM kill or eviction)
RETRYABLE_JOB_REASONS = frozenset({"BackoffLimitExceeded"})


class JobPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class NodeLike(Protocol):
    """What the plan needs of a node (controllers.nodes.NodeFacts fits)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class PreloadJob:
    """One preload Job as the operator's index sees it."""

    name: str
    node: str
    attempt: int
    generation: int
    uid: str
    phase: JobPhase
    active: int = 0
    failure_reason: str | None = None
    finished_at: dt.datetime | None = None


@dataclass(frozen=True)
class PreloadResult:
    """A preload container's termination message (or what could be read of it)."""

    reason: str
    message: str = ""
    bytes: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile of one cache looks at."""

    generation: int
    key: str
    spec: ModelDataCacheConfigSpec
    status: ModelDataCacheConfigStatus
    nodes: Sequence[NodeLike]
    jobs: Sequence[PreloadJob]
    results: Mapping[str, PreloadResult]
    retryable_reasons: Collection[str]


@dataclass
class Plan:
    """What to do and what to report."""

    status: ModelDataCacheConfigStatus
    create: list[tuple[str, int]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    recorded: list[tuple[NodeCacheStatus, PreloadJob]] = field(default_factory=list)
    requeue_after: float | None = None


def target_nodes(spec: ModelDataCacheConfigSpec, nodes: Iterable[NodeLike]) -> list[NodeLike]:
    """Live nodes matching the cache's targeting, by name; never a control-plane node."""
    matching = [
        n
        for n in nodes
        if placement.node_matches(n.labels, n.name, spec.node_selector, spec.node_affinity)
        and not tolerations.is_control_plane(n.labels)
    ]
    return sorted(matching, key=lambda n: n.name)


def model_size(spec: ModelDataCacheConfigSpec, status: ModelDataCacheConfigStatus) -> int | None:
    """The spec's size if given, else the size learned from an earlier preload."""
    return spec.model_size_bytes or status.model_size_bytes or None


def unrecorded(observed_jobs: Sequence[PreloadJob], status: ModelDataCacheConfigStatus) -> list[PreloadJob]:
    """Finished Jobs whose outcome status does not hold yet: the controller reads their pods' termination messages."""
    previous = {n.node: n for n in status.nodes or []}
    latest = _latest_by_node(observed_jobs)
    return [
        job
        for job in latest.values()
        if job.phase != JobPhase.RUNNING and not _is_recorded(previous.get(job.node), job)
    ]


def backoff_seconds(attempt: int) -> float:
    """Delay before attempt `attempt + 1`: 30 s, 60 s, 120 s, ... capped at 10 minutes."""
    return float(min(RETRY_BASE_SECONDS * 2 ** max(attempt - 1, 0), RETRY_MAX_SECONDS))


def _latest_by_node(jobs: Iterable[PreloadJob]) -> dict[str, PreloadJob]:
    latest: dict[str, PreloadJob] = {}
    for job in jobs:
        if job.node not in latest or job.attempt > latest[job.node].attempt:
            latest[job.node] = job
    return latest


def _is_recorded(previous: NodeCacheStatus | None, job: PreloadJob) -> bool:
    done = (NodeCacheState.READY, NodeCacheState.FAILED)
    return previous is not None and previous.attempts == job.attempt and previous.state in done


def _clip(text: str | None) -> str | None:
    return text[:MESSAGE_LIMIT] if text else text


@dataclass
class _NodePlanner:
    observed: Observed
    now: dt.datetime
    plan: Plan
    size: int | None

    @property
    def label_key(self) -> str:
        return nodelabels.weights_ready_label(self.observed.key)

    def retryable(self, reason: str) -> bool:
        return is_retryable(reason, self.observed.retryable_reasons)

    def node(self, node: NodeLike, previous: NodeCacheStatus | None, jobs: list[PreloadJob]) -> NodeCacheStatus:
        latest = max(jobs, key=lambda j: j.attempt) if jobs else None
        # Jobs of an attempt that status has moved past are stale (e.g. the index has not seen the new one yet).
        current = latest
        if latest and previous and previous.attempts and latest.attempt < previous.attempts:
            current = None
        self.plan.delete += [j.name for j in jobs if current is None or j.attempt < current.attempt]
        if node.labels.get(self.label_key) == nodelabels.READY:
            return self._ready(node.name, previous, current)
        capacity = (
            placement.check_capacity(
                self.size, placement.nvme_capacity_bytes(node.labels.get(nodelabels.INSTANCE_TYPE), node.annotations)
            )
            if self.size
            else None
        )
        if capacity is not None and not capacity.fits:
            return NodeCacheStatus(
                node=node.name,
                state=NodeCacheState.FAILED,
                reason=INSUFFICIENT_CAPACITY,
                message=capacity.message,
                attempts=previous.attempts if previous else None,
            )
        if current is None:
            return self._without_job(node.name, previous)
        if current.phase == JobPhase.RUNNING:
            state = NodeCacheState.DOWNLOADING if current.active else NodeCacheState.PENDING
            return NodeCacheStatus(node=node.name, state=state, attempts=current.attempt)
        if current.phase == JobPhase.SUCCEEDED:
            if _is_recorded(previous, current) and previous and previous.state == NodeCacheState.READY:
                # Ready was recorded for this very Job, and the label is gone since: check the node again.
                return self._rerun(node.name, current, "ready label removed; preloading again")
            self.plan.label.append(node.name)
            return self._ready(node.name, previous, current)
        return self._failed(node.name, previous, current)

    def _record(
        self,
        node: str,
        state: NodeCacheState,
        result: PreloadResult,
        previous: NodeCacheStatus | None,
        job: PreloadJob,
    ) -> NodeCacheStatus:
        """The node's entry for a finished Job's result; recorded (metrics, Events) the first time it is seen."""
        entry = NodeCacheStatus(
            node=node,
            state=state,
            reason=result.reason,
            message=_clip(result.message) or None,
            bytes=result.bytes,
            seconds=result.seconds,
            attempts=job.attempt,
        )
        if not _is_recorded(previous, job):
            self.plan.recorded.append((entry, job))
        return entry

    def _ready(self, node: str, previous: NodeCacheStatus | None, job: PreloadJob | None) -> NodeCacheStatus:
        result = self.observed.results.get(job.name) if job else None
        if result is not None and job is not None and job.phase == JobPhase.SUCCEEDED:
            return self._record(node, NodeCacheState.READY, result, previous, job)
        if previous is not None and previous.state == NodeCacheState.READY:
            return previous
        attempts = job.attempt if job else (previous.attempts if previous else None)
        return NodeCacheStatus(node=node, state=NodeCacheState.READY, reason="Labelled", attempts=attempts)

    def _without_job(self, node: str, previous: NodeCacheStatus | None) -> NodeCacheStatus:
        if previous is None or previous.attempts is None:
            return self._create(node, 1)
        if previous.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING):
            return self._create(node, previous.attempts)  # created before, not seen yet (or deleted by someone)
        if previous.state == NodeCacheState.FAILED and previous.reason != INSUFFICIENT_CAPACITY:
            spec_changed = (self.observed.status.observed_generation or 0) < self.observed.generation
            reason = previous.reason or ""
            if not spec_changed and not (self.retryable(reason) and previous.attempts < MAX_ATTEMPTS):
                return previous  # permanent, and its Job is gone (TTL): stays Failed until the spec changes
        return self._create(node, previous.attempts + 1)

    def _create(self, node: str, attempt: int) -> NodeCacheStatus:
        self.plan.create.append((node, attempt))
        return NodeCacheStatus(node=node, state=NodeCacheState.PENDING, attempts=attempt)

    def _rerun(self, node: str, job: PreloadJob, message: str) -> NodeCacheStatus:
        self.plan.delete.append(job.name)
        entry = self._create(node, job.attempt + 1)
        return entry.model_copy(update={"message": message})

    def _failed(self, node: str, previous: NodeCacheStatus | None, job: PreloadJob) -> NodeCacheStatus:
        result = self.observed.results.get(job.name)
        if result is None and previous is not None and _is_recorded(previous, job):
            message = (previous.message or "").split(RETRY_SEPARATOR)[0]
            result = PreloadResult(previous.reason or "JobFailed", message, previous.bytes, previous.seconds)
        if result is None:
            reason = job.failure_reason or "JobFailed"
            result = PreloadResult(
                reason=reason, message=f"preload Job {job.name} failed ({reason}) without a termination message"
            )
        entry = self._record(node, NodeCacheState.FAILED, result, previous, job)
        if job.generation < self.observed.generation:
            return self._rerun(node, job, f"spec changed after {result.reason}; preloading again")
        if self.retryable(result.reason) and job.attempt < MAX_ATTEMPTS:
            due = (job.finished_at or self.now) + dt.timedelta(seconds=backoff_seconds(job.attempt))
            wait = (due - self.now).total_seconds()
            if wait <= 0:
                return self._rerun(node, job, f"retrying after {result.reason}")
            self.plan.requeue_after = min(wait, self.plan.requeue_after or wait)
            retry = f"{RETRY_SEPARATOR}{job.attempt + 1} of {MAX_ATTEMPTS} at {due.strftime('%Y-%m-%dT%H:%M:%SZ')}"
            return entry.model_copy(update={"message": _clip((entry.message or result.reason) + retry)})
        return entry


def is_retryable(reason: str, retryable_reasons: Collection[str]) -> bool:
    """A preload reason worth retrying with the same spec, or a Job failure without a message (crash, eviction)."""
    return reason in retryable_reasons or reason in RETRYABLE_JOB_REASONS


def is_permanent_failure(entry: NodeCacheStatus, retryable_reasons: Collection[str]) -> bool:
    """A Failed node that will not be retried with this spec."""
    if entry.state != NodeCacheState.FAILED:
        return False
    return not is_retryable(entry.reason or "", retryable_reasons) or (entry.attempts or 0) >= MAX_ATTEMPTS


def plan(observed: Observed, now: dt.datetime) -> Plan:
    """Per-node decisions plus the cache's new status."""
    previous_status = observed.status
    result = Plan(status=previous_status)
    size = model_size(observed.spec, previous_status)
    planner = _NodePlanner(observed=observed, now=now, plan=result, size=size)
    previous = {n.node: n for n in previous_status.nodes or []}
    jobs_by_node: dict[str, list[PreloadJob]] = {}
    for job in observed.jobs:
        jobs_by_node.setdefault(job.node, []).append(job)
    targets = target_nodes(observed.spec, observed.nodes)
    entries = [planner.node(n, previous.get(n.name), jobs_by_node.pop(n.name, [])) for n in targets]
    for gone in jobs_by_node.values():  # nodes that left or stopped matching
        result.delete += [j.name for j in gone]
    learned = [e.bytes for e, _ in result.recorded if e.state == NodeCacheState.READY and e.bytes]
    measured = max(learned) if learned else previous_status.model_size_bytes
    result.status = summarize(observed, entries, measured, observed.spec.model_size_bytes or measured, now)
    result.delete = sorted(set(result.delete))
    return result


def summarize(
    observed: Observed, entries: list[NodeCacheStatus], measured: int | None, size: int | None, now: dt.datetime
) -> ModelDataCacheConfigStatus:
    """The cache's status from its nodes: state, counts, bytes, message and the Ready condition."""
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
        state, reason, message = CacheState.DOWNLOADING, "Downloading", f"{len(ready)}/{total} nodes ready"
    else:
        state, reason, message = (
            CacheState.PENDING,
            "Pending",
            f"{len(ready)}/{total} nodes ready; preload Jobs starting",
        )
    message = _clip(message) or message
    ready_condition = conditions.condition(
        ConditionType.READY, state == CacheState.READY, reason, message, observed.generation
    )
    done = sum((size or e.bytes or 0) for e in ready) if ready else 0
    return ModelDataCacheConfigStatus(
        state=state,
        ready_nodes=len(ready),
        target_nodes=total,
        message=message,
        conditions=conditions.set_condition(observed.status.conditions or [], ready_condition, _timestamp(now)),
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
            "conditions": conditions.set_condition(status.conditions or [], ready_condition, _timestamp(now)),
        }
    )


def _timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
