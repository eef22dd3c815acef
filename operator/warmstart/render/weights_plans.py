"""Plan a weights cache from what is observed: per-node state, the Jobs to create or delete, the labels to set, status.

Pure: the controller passes in the nodes and Jobs from its kopf indexes, the termination messages it read, and `now`.
Rules (docs/weights-cache.md has them for users):
- a node holding the ready label is Ready; the label is the truth, whatever happened to its Job;
- a node that cannot hold the model (known size vs NVMe capacity) is Failed/InsufficientCapacity and gets no Job;
- every other target node has exactly one current Job, `attempt` numbered; older attempts are deleted;
- a succeeded Job labels its node; if the label disappears after that was recorded, the node is preloaded again
  (`--if-missing` makes that seconds when the files are still there), so a label is never set without a fresh check
  (the controller reads such a node live first: labelling.ready_unseen, so a lagging view never counts as removal);
- a failed Job is retried when its reason is retryable (exponential backoff from the Job's end, at most
  MAX_ATTEMPTS), or at once when the spec changed since it was created; otherwise the node stays Failed;
- Jobs on nodes that left the target set are deleted; so are Jobs on unavailable nodes (render/node_health.py),
  which leave the targets and are listed in `unavailableNodes`;
- at most `throttling.limit` nodes preload at once, counting the preloads of other caches of the same source (any
  namespace); the others wait as Pending/Queued without a Job;
- the capacity check counts the other caches on the node (render/nvme_budget.py) and may evict unreferenced ones.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus, NodeCacheStatus, UnavailableNode
from warmstart.api.preloading import Reason
from warmstart.api.states import NodeCacheState
from warmstart.render import nvme_budget, throttling, tolerations
from warmstart.render import weights_summaries as summaries
from warmstart.render.weights_observations import (
    EVICTED,
    INSUFFICIENT_CAPACITY,
    LABELLED,
    MAX_ATTEMPTS,
    QUEUED,
    RECHECKED_REASONS,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    RETRY_SEPARATOR,
    JobPhase,
    NodeLike,
    Observed,
    Plan,
    PreloadJob,
    PreloadResult,
    clip,
    is_permanent_failure,
    is_retryable,
)
from warmstart.render.weights_summaries import deleting, summarize

__all__ = [
    "EVICTED",
    "INSUFFICIENT_CAPACITY",
    "MAX_ATTEMPTS",
    "QUEUED",
    "JobPhase",
    "NodeLike",
    "Observed",
    "Plan",
    "PreloadJob",
    "PreloadResult",
    "backoff_seconds",
    "deleting",
    "is_permanent_failure",
    "is_retryable",
    "model_size",
    "plan",
    "summarize",
    "target_nodes",
    "unrecorded",
]


AnyNode = TypeVar("AnyNode", bound=NodeLike)


def target_nodes(
    spec: ModelDataCacheConfigSpec, nodes: Iterable[AnyNode], demanded: Collection[str] = frozenset()
) -> list[AnyNode]:
    """Live nodes matching the cache's targeting, or where a model pod waits for it (`demanded`), by name; never a
    control-plane node."""
    matching = [
        n
        for n in nodes
        if (n.name in demanded or placement.node_matches(n.labels, n.name, spec.node_selector, spec.node_affinity))
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


def _proven(previous: NodeCacheStatus | None, job: PreloadJob | None) -> bool:
    """Whether this cache's own preload succeeded on the node (not only another cache of the key)."""
    if job is not None and job.phase == JobPhase.SUCCEEDED:
        return True
    return previous is not None and previous.state == NodeCacheState.READY and previous.reason not in (None, LABELLED)


def _is_recorded(previous: NodeCacheStatus | None, job: PreloadJob) -> bool:
    done = (NodeCacheState.READY, NodeCacheState.FAILED)
    return previous is not None and previous.attempts == job.attempt and previous.state in done


@dataclass
class _NodePlanner:
    observed: Observed
    now: dt.datetime
    plan: Plan
    size: int | None
    #: preloads this reconcile may still start (throttling.limit minus the ones running)
    slots: int = 0

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
        attempts = previous.attempts if previous else None
        if node.name in self.observed.evicted and not self.observed.spec.parent_references:
            self.plan.delete += [j.name for j in jobs if j.phase == JobPhase.RUNNING]
            message = "evicted to make room for another cache; preloaded again when an endpoint references it"
            return NodeCacheStatus(
                node=node.name, state=NodeCacheState.FAILED, reason=EVICTED, message=message, attempts=attempts
            )
        labelled = node.labels.get(self.label_key) == nodelabels.READY
        if labelled and (not self.observed.prove_each_reader or _proven(previous, current)):
            ready = self._ready(node.name, previous, current)
            return self._reprove(node.name, ready, current) if self._stale_proof(node, ready) else ready
        if not labelled:
            fitted = self._fit(node, attempts)
            if fitted is not None:
                return fitted
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

    def _fit(self, node: NodeLike, attempts: int | None) -> NodeCacheStatus | None:
        """Failed when the cache cannot fit on the node's NVMe; else None, with the evictions it needs planned."""
        capacity = placement.nvme_capacity_bytes(node.labels.get(nodelabels.INSTANCE_TYPE), node.annotations)
        others = self.observed.residents.get(node.name, ())
        fit = nvme_budget.fit(self.size, capacity, others, self.observed.eviction_policy) if self.size else None
        if fit is not None and not fit.fits:
            return NodeCacheStatus(
                node=node.name,
                state=NodeCacheState.FAILED,
                reason=INSUFFICIENT_CAPACITY,
                message=fit.message,
                attempts=attempts,
            )
        if fit is not None and fit.evict:
            self.plan.evict += [(node.name, victim) for victim in fit.evict]
        return None

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
            message=clip(result.message) or None,
            bytes=result.bytes,
            seconds=result.seconds,
            attempts=job.attempt,
            content_sha256=result.manifest_sha256 or None,
        )
        if not _is_recorded(previous, job):
            self.plan.recorded.append((entry, job))
            published = state == NodeCacheState.READY and result.reason == Reason.DOWNLOADED and result.manifest_sha256
            if published and self.observed.prove_each_reader:
                self.plan.content[node] = result.manifest_sha256
        return entry

    def _ready(self, node: str, previous: NodeCacheStatus | None, job: PreloadJob | None) -> NodeCacheStatus:
        result = self.observed.results.get(job.name) if job else None
        if result is not None and job is not None and job.phase == JobPhase.SUCCEEDED:
            return self._record(node, NodeCacheState.READY, result, previous, job)
        if previous is not None and previous.state == NodeCacheState.READY:
            return previous
        attempts = job.attempt if job else (previous.attempts if previous else None)
        return NodeCacheStatus(node=node, state=NodeCacheState.READY, reason=LABELLED, attempts=attempts)

    def _without_job(self, node: str, previous: NodeCacheStatus | None) -> NodeCacheStatus:
        if previous is None or previous.attempts is None:
            return self._create(node, 1)
        if previous.reason == QUEUED:
            return self._create(node, previous.attempts + 1)
        if _in_flight(previous):
            return self._create(node, previous.attempts)  # created before, not seen yet (or deleted by someone)
        if previous.state == NodeCacheState.FAILED and previous.reason not in RECHECKED_REASONS:
            spec_changed = (self.observed.status.observed_generation or 0) < self.observed.generation
            reason = previous.reason or ""
            if not spec_changed and not (self.retryable(reason) and previous.attempts < MAX_ATTEMPTS):
                return previous  # permanent, and its Job is gone (TTL): stays Failed until the spec changes
        return self._create(node, previous.attempts + 1)

    def _create(self, node: str, attempt: int) -> NodeCacheStatus:
        """A Job for `attempt`, or Pending/Queued (no Job, attempts so far) when the throttle has no slot left."""
        if self.slots <= 0:
            return NodeCacheStatus(
                node=node,
                state=NodeCacheState.PENDING,
                reason=QUEUED,
                message="waiting for a preload slot (preloadConcurrency)",
                attempts=(attempt - 1) or None,
            )
        self.slots -= 1
        self.plan.create.append((node, attempt))
        return NodeCacheStatus(node=node, state=NodeCacheState.PENDING, attempts=attempt)

    def _stale_proof(self, node: NodeLike, ready: NodeCacheStatus) -> bool:
        """Whether this cache's proof on the node names other content than the key holds there now (a namespace of
        the key's scope published new content): the CSI driver no longer mounts the key for this namespace."""
        if not self.observed.prove_each_reader:
            return False
        content = node.annotations.get(nodelabels.weights_content_annotation(self.observed.key))
        return bool(content and ready.content_sha256 and content != ready.content_sha256)

    def _reprove(self, node: str, ready: NodeCacheStatus, job: PreloadJob | None) -> NodeCacheStatus:
        """A new attempt of this cache's own preload on the node, which proves its access to the new content."""
        if job is not None:
            self.plan.delete.append(job.name)
        entry = self._create(node, (job.attempt if job else ready.attempts or 0) + 1)
        return entry.model_copy(update={"message": "the key's content on the node changed: proving access to it"})

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
            return entry.model_copy(update={"message": clip((entry.message or result.reason) + retry)})
        return entry


def _in_flight(previous: NodeCacheStatus | None) -> bool:
    """Whether status shows a preload Job started on the node (Pending or Downloading, not waiting for a slot)."""
    return (
        previous is not None
        and previous.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING)
        and previous.reason != QUEUED
        and previous.attempts is not None
    )


def plan(observed: Observed, now: dt.datetime) -> Plan:
    """Per-node decisions plus the cache's new status."""
    previous_status = observed.status
    result = Plan(status=previous_status)
    size = model_size(observed.spec, previous_status)
    previous = {n.node: n for n in previous_status.nodes or []}
    jobs_by_node: dict[str, list[PreloadJob]] = {}
    for job in observed.jobs:
        jobs_by_node.setdefault(job.node, []).append(job)
    matching = target_nodes(observed.spec, observed.nodes, observed.demanded)
    targets = [n for n in matching if n.name not in observed.unavailable]
    limit = throttling.limit(observed.throttle, observed.spec.preload_concurrency, len(targets))
    latest = _latest_by_node(observed.jobs)
    running = sum(1 for n in targets if n.name in latest and latest[n.name].phase == JobPhase.RUNNING)
    slots = limit - running - observed.source_busy
    planner = _NodePlanner(observed=observed, now=now, plan=result, size=size, slots=slots)
    # nodes that status shows preloading take the slots first: their Job may still run (a new operator process
    # trusts no Job it did not apply), and applying it again adopts it, so the preloads at once stay within the limit
    decided = {
        n.name: planner.node(n, previous.get(n.name), jobs_by_node.pop(n.name, []))
        for n in sorted(targets, key=lambda n: not _in_flight(previous.get(n.name)))
    }
    entries = [decided[n.name] for n in targets]
    for gone in jobs_by_node.values():  # nodes that left, stopped matching, or are unavailable
        result.delete += [j.name for j in gone]
    learned = [e.bytes for e, _ in result.recorded if e.state == NodeCacheState.READY and e.bytes]
    measured = max(learned) if learned else previous_status.model_size_bytes

    left_out = [
        UnavailableNode(node=n.name, reason=observed.unavailable[n.name])
        for n in matching
        if n.name in observed.unavailable
    ]
    size_now = observed.spec.model_size_bytes or measured
    entries = summaries.with_usage(observed, targets, entries, result.evict, size_now)
    status = summaries.summarize(observed, entries, measured, size_now, now, len(left_out))
    queued = sum(1 for e in entries if e.reason == QUEUED)
    result.status = status.model_copy(
        update={
            "unavailable_nodes": left_out or None,
            "queued_nodes": queued or None,
            "preload_concurrency": limit,
            "last_used_time": summaries.last_used(observed, now),
        }
    )
    result.delete = sorted(set(result.delete))
    return result
