"""Planning a weights cache: which Jobs to create or delete, which nodes to label, and the status it reports."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import CacheState, NodeCacheState
from warmstart.placement import GB, instance_type_affinity
from warmstart.render import nvme_budget
from warmstart.render import weights_plans as planning
from warmstart.render import weights_summaries as summaries
from warmstart.render.weights_plans import JobPhase, PreloadJob, PreloadResult

KEY = "0123456789ab"
READY = {nodelabels.weights_ready_label(KEY): nodelabels.READY}
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
RETRYABLE = frozenset({"NetworkError"})


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def node(name: str, itype: str = "ml.g5.24xlarge", ready: bool = False, nvme: int | None = None) -> Node:
    found = {nodelabels.INSTANCE_TYPE: itype, **(READY if ready else {})}
    return Node(name, found, {nodelabels.NVME_CAPACITY_ANNOTATION: str(nvme)} if nvme else {})


def spec(**changes: Any) -> ModelDataCacheConfigSpec:
    doc = {
        "modelSourceConfig": {"modelSourceType": "s3", "s3Storage": {"bucketName": "bucket", "region": "us-west-2"}},
        "nodeAffinity": instance_type_affinity(["ml.g5.24xlarge"]).to_api(),
        **changes,
    }
    return ModelDataCacheConfigSpec.model_validate(doc)


def job(node_name: str, phase: JobPhase, attempt: int = 1, generation: int = 1, **changes: Any) -> PreloadJob:
    values: dict[str, Any] = {
        "name": f"preload-{node_name}-{attempt}",
        "node": node_name,
        "attempt": attempt,
        "generation": generation,
        "uid": f"uid-{node_name}-{attempt}",
        "phase": phase,
        **changes,
    }
    return PreloadJob(**values)


def run(
    nodes: list[Node],
    jobs: list[PreloadJob] = [],  # noqa: B006 - never mutated
    results: dict[str, PreloadResult] | None = None,
    status: ModelDataCacheConfigStatus | None = None,
    generation: int = 1,
    now: dt.datetime = NOW,
    **spec_changes: Any,
) -> planning.Plan:
    observed = planning.Observed(
        generation=generation,
        key=KEY,
        spec=spec(**spec_changes),
        status=status or ModelDataCacheConfigStatus(),
        nodes=nodes,
        jobs=jobs,
        results=results or {},
        retryable_reasons=RETRYABLE,
    )
    return planning.plan(observed, now)


def entries(plan: planning.Plan) -> dict[str, NodeCacheStatus]:
    return {e.node: e for e in plan.status.nodes or []}


def test_new_cache_creates_one_job_per_matching_node() -> None:
    plan = run([node("a"), node("b"), node("c", itype="ml.p5.48xlarge")])
    assert plan.create == [("a", 1), ("b", 1)]
    assert plan.status.state == CacheState.PENDING
    assert (plan.status.target_nodes, plan.status.ready_nodes, plan.status.key) == (2, 0, KEY)


def test_running_jobs_mean_downloading_and_create_nothing() -> None:
    plan = run([node("a"), node("b")], [job("a", JobPhase.RUNNING, active=1), job("b", JobPhase.RUNNING)])
    assert plan.create == [] and plan.delete == []
    assert entries(plan)["a"].state == NodeCacheState.DOWNLOADING
    assert entries(plan)["b"].state == NodeCacheState.PENDING
    assert plan.status.state == CacheState.DOWNLOADING


def test_succeeded_job_labels_node_and_records_bytes_once() -> None:
    done = job("a", JobPhase.SUCCEEDED)
    plan = run([node("a")], [done], {done.name: PreloadResult("Downloaded", "ok", 16 * GB, 12.5)})
    assert plan.label == ["a"]
    assert plan.status.state == CacheState.READY and plan.status.ready_nodes == 1
    assert plan.status.model_size_bytes == 16 * GB and plan.status.bytes_done == 16 * GB
    assert [e.bytes for e, _ in plan.recorded] == [16 * GB]
    again = run([node("a", ready=True)], [done], status=plan.status)
    assert again.recorded == [] and again.label == [] and again.create == []
    assert again.status == plan.status


def test_ready_condition_carries_generation_and_keeps_transition_time() -> None:
    plan = run([node("a", ready=True)], generation=3)
    ready = plan.status.conditions[0] if plan.status.conditions else None
    assert ready is not None and ready.status == "True" and ready.observed_generation == 3
    later = run([node("a", ready=True)], status=plan.status, generation=3, now=NOW + dt.timedelta(hours=1))
    assert later.status.conditions == plan.status.conditions


def test_model_too_big_for_a_node_fails_that_node_without_a_job() -> None:
    plan = run([node("big", nvme=4000 * GB), node("small", nvme=100 * GB)], modelSizeBytes=200 * GB)
    assert plan.create == [("big", 1)]
    small = entries(plan)["small"]
    assert small.state == NodeCacheState.FAILED and small.reason == "InsufficientCapacity"
    assert "does not fit" in (small.message or "")
    assert plan.status.state == CacheState.FAILED and plan.status.bytes_total == 400 * GB


def test_permanent_failure_is_reported_once_and_not_retried() -> None:
    failed = job("a", JobPhase.FAILED, failure_reason="PodFailurePolicy", finished_at=NOW)
    plan = run([node("a"), node("b", ready=True)], [failed], {failed.name: PreloadResult("NotFound", "no such key")})
    assert plan.create == [] and plan.delete == []
    assert entries(plan)["a"].reason == "NotFound"
    assert plan.status.state == CacheState.FAILED
    assert plan.status.conditions and plan.status.conditions[0].reason == "NotFound"
    assert len(plan.recorded) == 1
    later = run([node("a"), node("b", ready=True)], [failed], status=plan.status, now=NOW + dt.timedelta(hours=2))
    assert later.recorded == [] and later.create == [] and later.status.state == CacheState.FAILED
    ttl_gone = run([node("a"), node("b", ready=True)], [], status=plan.status)
    assert ttl_gone.create == [] and ttl_gone.status.state == CacheState.FAILED


def test_spec_change_retries_a_permanent_failure() -> None:
    failed = job("a", JobPhase.FAILED, generation=1, finished_at=NOW)
    plan = run([node("a")], [failed], {failed.name: PreloadResult("AccessDenied", "403")}, generation=2)
    assert plan.delete == [failed.name] and plan.create == [("a", 2)]


def test_retryable_failure_waits_for_backoff_then_retries() -> None:
    failed = job("a", JobPhase.FAILED, finished_at=NOW)
    plan = run(
        [node("a")],
        [failed],
        {failed.name: PreloadResult("NetworkError", "timeout")},
        now=NOW + dt.timedelta(seconds=10),
    )
    assert plan.create == [] and plan.requeue_after == 20.0
    assert plan.status.state == CacheState.DOWNLOADING
    due = run([node("a")], [failed], status=plan.status, now=NOW + dt.timedelta(seconds=31))
    assert due.delete == [failed.name] and due.create == [("a", 2)]
    assert entries(due)["a"].attempts == 2


def test_retries_stop_after_max_attempts() -> None:
    failed = job("a", JobPhase.FAILED, attempt=planning.MAX_ATTEMPTS, finished_at=NOW)
    plan = run(
        [node("a")], [failed], {failed.name: PreloadResult("NetworkError", "timeout")}, now=NOW + dt.timedelta(hours=1)
    )
    assert plan.create == [] and plan.status.state == CacheState.FAILED


def test_backoff_doubles_and_caps() -> None:
    assert [planning.backoff_seconds(a) for a in (1, 2, 3, 10)] == [30.0, 60.0, 120.0, 600.0]


def test_node_that_left_loses_its_job_and_its_count() -> None:
    plan = run([node("a")], [job("a", JobPhase.RUNNING), job("gone", JobPhase.RUNNING)])
    assert plan.delete == ["preload-gone-1"] and plan.status.target_nodes == 1


def test_removed_label_after_recorded_success_reruns_the_preload() -> None:
    done = job("a", JobPhase.SUCCEEDED)
    first = run([node("a")], [done], {done.name: PreloadResult("Downloaded", "ok", GB, 1.0)})
    removed = run([node("a")], [done], status=first.status)
    assert removed.delete == [done.name] and removed.create == [("a", 2)] and removed.label == []


def test_job_created_but_not_yet_in_the_index_is_applied_again_not_renumbered() -> None:
    first = run([node("a")])
    assert first.create == [("a", 1)]
    stale = run([node("a")], [], status=first.status)
    assert stale.create == [("a", 1)]


def test_older_attempts_are_deleted() -> None:
    jobs = [job("a", JobPhase.FAILED, attempt=1), job("a", JobPhase.RUNNING, attempt=2)]
    plan = run([node("a")], jobs)
    assert plan.delete == ["preload-a-1"] and plan.create == []


def test_no_matching_node_is_pending_not_ready() -> None:
    plan = run([node("c", itype="ml.p5.48xlarge")])
    assert plan.status.state == CacheState.PENDING and plan.status.target_nodes == 0
    assert plan.status.conditions and plan.status.conditions[0].reason == "NoTargetNodes"


def test_unrecorded_lists_finished_jobs_until_status_holds_them() -> None:
    done = job("a", JobPhase.SUCCEEDED)
    running = job("b", JobPhase.RUNNING)
    assert planning.unrecorded([done, running], ModelDataCacheConfigStatus()) == [done]
    plan = run([node("a"), node("b")], [done, running], {done.name: PreloadResult("Downloaded")})
    assert planning.unrecorded([done, running], plan.status) == []


def test_deleting_status() -> None:
    status = planning.deleting(
        ModelDataCacheConfigStatus(state=CacheState.READY), 2, "removing the cache from 3 nodes", NOW
    )
    assert status.state == CacheState.DELETING and status.conditions and status.conditions[0].reason == "Deleting"


def throttled(nodes: list[Node], jobs: list[PreloadJob] = [], **kwargs: Any) -> planning.Plan:  # noqa: B006
    status = kwargs.pop("status", None)
    observed = planning.Observed(
        generation=1,
        key=KEY,
        spec=spec(**kwargs.pop("spec", {})),
        status=status or ModelDataCacheConfigStatus(),
        nodes=nodes,
        jobs=jobs,
        results={},
        retryable_reasons=RETRYABLE,
        **kwargs,
    )
    return planning.plan(observed, NOW)


def test_throttle_starts_at_most_the_limit_and_queues_the_rest_without_jobs() -> None:
    fleet = [node(f"n{i:02d}") for i in range(10)]
    first = throttled(fleet, spec={"preloadConcurrency": 3})
    assert first.create == [("n00", 1), ("n01", 1), ("n02", 1)]
    queued = [e for e in first.status.nodes or [] if e.reason == planning.QUEUED]
    assert len(queued) == 7 and all(e.state == NodeCacheState.PENDING and e.attempts is None for e in queued)
    assert (first.status.queued_nodes, first.status.preload_concurrency, first.status.target_nodes) == (7, 3, 10)
    assert first.status.state == CacheState.PENDING and first.status.ready_nodes == 0
    running = [job(n, JobPhase.RUNNING, active=1) for n in ("n00", "n01")] + [job("n02", JobPhase.SUCCEEDED)]
    second = throttled(fleet, running, spec={"preloadConcurrency": 3}, status=first.status)
    assert second.create == [("n03", 1)] and second.label == ["n02"]
    assert second.status.queued_nodes == 6 and second.status.state == CacheState.DOWNLOADING


def test_preloads_of_the_same_source_by_other_caches_take_this_caches_slots() -> None:
    fleet = [node(f"n{i:02d}") for i in range(10)]
    shared = throttled(fleet, spec={"preloadConcurrency": 3}, source_busy=2)
    assert shared.create == [("n00", 1)] and shared.status.queued_nodes == 9
    full = throttled(fleet, spec={"preloadConcurrency": 3}, source_busy=5)
    assert full.create == [] and full.status.queued_nodes == 10


def test_default_throttle_lets_a_small_fleet_fill_at_once() -> None:
    plan = run([node(f"n{i:02d}") for i in range(16)])
    assert len(plan.create) == 16 and plan.status.queued_nodes is None and plan.status.preload_concurrency == 16


def test_a_queued_retry_gets_the_next_attempt_when_a_slot_frees() -> None:
    failed = job("a", JobPhase.FAILED, failure_reason="BackoffLimitExceeded", finished_at=NOW - dt.timedelta(hours=1))
    busy = job("b", JobPhase.RUNNING, active=1)
    plan = throttled([node("a"), node("b")], [failed, busy], spec={"preloadConcurrency": 1})
    assert plan.create == [] and plan.delete == [failed.name]
    assert entries(plan)["a"].reason == planning.QUEUED and entries(plan)["a"].attempts == 1
    done = job("b", JobPhase.SUCCEEDED)
    freed = throttled([node("a"), node("b")], [done], spec={"preloadConcurrency": 1}, status=plan.status)
    assert freed.create == [("a", 2)] and freed.label == ["b"]


def test_after_a_takeover_the_nodes_status_shows_preloading_take_the_slots_before_queued_ones() -> None:
    """A new operator process trusts no Job it did not apply, so it sees none: the nodes status shows preloading get
    their Job applied again (the same name, so the running Job is adopted) before a queued node starts one more."""
    fleet = [node(f"n{i:02d}") for i in range(6)]
    queued = NodeCacheStatus(node="", state=NodeCacheState.PENDING, reason=planning.QUEUED)
    preloading = NodeCacheStatus(node="", state=NodeCacheState.DOWNLOADING, attempts=1)
    status = ModelDataCacheConfigStatus(
        nodes=[(preloading if n.name in ("n04", "n05") else queued).model_copy(update={"node": n.name}) for n in fleet]
    )
    after = throttled(fleet, [], spec={"preloadConcurrency": 2}, status=status)
    assert after.create == [("n04", 1), ("n05", 1)], "two preloads at once, not four"
    assert [e.node for e in after.status.nodes or []] == [n.name for n in fleet], "status keeps the nodes' order"
    assert after.status.queued_nodes == 4


def test_unavailable_nodes_leave_the_targets_lose_their_jobs_and_are_listed() -> None:
    jobs = [job("a", JobPhase.RUNNING, active=1), job("b", JobPhase.RUNNING, active=1)]
    plan = throttled(
        [node("a"), node("b"), node("c", ready=True)], jobs, unavailable={"b": "NotReady", "other": "Cordoned"}
    )
    assert plan.delete == [jobs[1].name] and plan.create == []
    assert (plan.status.target_nodes, plan.status.ready_nodes) == (2, 1)
    assert [(u.node, u.reason) for u in plan.status.unavailable_nodes or []] == [("b", "NotReady")]
    assert "1 matching nodes unavailable" in (plan.status.message or "")
    back = throttled([node("a"), node("b"), node("c", ready=True)], jobs[:1], status=plan.status)
    assert back.create == [("b", 1)] and back.status.unavailable_nodes is None


def test_a_ready_node_that_becomes_unavailable_does_not_hold_the_cache_back() -> None:
    plan = throttled([node("a", ready=True), node("b")], unavailable={"b": "Unreachable"})
    assert plan.status.state == CacheState.READY and (plan.status.ready_nodes, plan.status.target_nodes) == (1, 1)


def others(*residents: nvme_budget.Resident) -> dict[str, list[nvme_budget.Resident]]:
    return {"a": list(residents)}


def old_cache(referenced: bool = False) -> nvme_budget.Resident:
    return nvme_budget.Resident("old", 60 * GB, referenced, "2026-01-01T00:00:00Z", "ns", "weights-old")


def test_capacity_counts_the_other_caches_and_never_evicts_by_default() -> None:
    plan = throttled([node("a", nvme=100 * GB)], spec={"modelSizeBytes": 40 * GB}, residents=others(old_cache()))
    entry = entries(plan)["a"]
    assert (entry.state, entry.reason) == (NodeCacheState.FAILED, "InsufficientCapacity")
    assert plan.create == [] and plan.evict == []
    assert (entry.nvme_used_bytes, entry.nvme_free_bytes) == (60 * GB, 40 * GB)


def test_lru_policy_evicts_an_unreferenced_cache_and_fills_the_node() -> None:
    lru = nvme_budget.EvictionPolicy.EVICT_UNREFERENCED_LRU
    kwargs: dict[str, Any] = {"spec": {"modelSizeBytes": 40 * GB}, "eviction_policy": lru}
    plan = throttled([node("a", nvme=100 * GB)], residents=others(old_cache()), **kwargs)
    assert plan.create == [("a", 1)] and [(n, r.key) for n, r in plan.evict] == [("a", "old")]
    assert entries(plan)["a"].nvme_used_bytes == 40 * GB
    kept = throttled([node("a", nvme=100 * GB)], residents=others(old_cache(referenced=True)), **kwargs)
    assert kept.create == [] and kept.evict == [] and entries(kept)["a"].reason == "InsufficientCapacity"


def test_an_evicted_unreferenced_cache_stays_off_the_node_until_an_endpoint_references_it() -> None:
    evicted = throttled([node("a", ready=True), node("b")], evicted={"a"})
    assert (entries(evicted)["a"].state, entries(evicted)["a"].reason) == (NodeCacheState.FAILED, "Evicted")
    assert evicted.create == [("b", 1)]
    parent = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "e", "uid": "u"}]
    wanted = throttled([node("a"), node("b")], evicted={"a"}, status=evicted.status, spec={"parentReferences": parent})
    assert ("a", 1) in wanted.create


def test_last_used_time_is_refreshed_hourly_while_referenced_and_frozen_after() -> None:
    parent = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "e", "uid": "u"}]
    stamped = ModelDataCacheConfigStatus(last_used_time="2026-01-01T11:30:00Z")
    assert run([node("a")], status=stamped, parentReferences=parent).status.last_used_time == "2026-01-01T11:30:00Z"
    stale = ModelDataCacheConfigStatus(last_used_time="2026-01-01T10:00:00Z")
    assert run([node("a")], status=stale, parentReferences=parent).status.last_used_time == "2026-01-01T12:00:00Z"
    assert run([node("a")], status=stale).status.last_used_time == "2026-01-01T10:00:00Z"


def test_a_node_whose_label_write_failed_is_not_counted_ready() -> None:
    nodes = [node("a", ready=True), node("b", ready=True)]
    observed = planning.Observed(
        generation=1,
        key=KEY,
        spec=spec(),
        status=ModelDataCacheConfigStatus(),
        nodes=nodes,
        jobs=[],
        results={},
        retryable_reasons=RETRYABLE,
    )
    plan = planning.plan(observed, NOW)
    assert plan.status.ready_nodes == 2
    fixed = summaries.with_failed_steps(observed, plan.status, {"a": "labelling node a failed (Forbidden)"}, NOW)
    assert (fixed.ready_nodes, fixed.target_nodes, fixed.state) == (1, 2, CacheState.DOWNLOADING)
    by_node = {e.node: e for e in fixed.nodes or []}
    assert (by_node["a"].state, by_node["a"].reason) == (NodeCacheState.DOWNLOADING, "NodeStepFailed")
    assert by_node["b"].state == NodeCacheState.READY
    assert summaries.with_failed_steps(observed, plan.status, {}, NOW) is plan.status
