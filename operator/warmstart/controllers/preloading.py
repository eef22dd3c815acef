"""The reconcile of one weights cache: a preload Job per target node until the node is labelled ready, and its status.

Everything is read from two kopf indexes (nodes, and this cache's Jobs), so a reconcile makes no LIST call; it
writes only what changed: Jobs to create or delete, node labels, and status when it differs. The only reads are one
pod LIST per finished Job, to take its termination message, once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from warmstart.api import nodelabels
from warmstart.api import preloading as preload_results
from warmstart.api.caches import (
    MDCC_KIND,
    ModelDataCacheConfigSpec,
    ModelDataCacheConfigStatus,
)
from warmstart.controllers import fsx, handling, labelling, nodes, nvme_usage, signing, weights_reporting
from warmstart.controllers.resolving import ResolutionFailed
from warmstart.controllers.storage import Invalid, Store
from warmstart.render import fsx as render_fsx
from warmstart.render import hostpaths, keys, names, node_health, nvme_budget, owners, throttling, tolerations
from warmstart.render import jobs as render_jobs
from warmstart.render import weights_plans as planning
from warmstart.render.context import RenderContext

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Memory:
    """Per-cache state of this operator process (kopf gives each object its own memo)."""

    last_run: float = 0.0
    fingerprint: tuple[Any, ...] = ()
    due: float | None = None
    #: node -> monotonic time this process labelled it ready
    labelled: dict[str, float] = dataclasses.field(default_factory=dict)
    #: (resourceVersion our last status write was based on, the status written): the watch may not have caught up
    written: tuple[str, ModelDataCacheConfigStatus] | None = None
    #: DNS and mount names of FSx sources that the spec left out (DescribeFileSystems)
    fsx_lookups: fsx.Lookups = dataclasses.field(default_factory=fsx.Lookups.empty)


#: node facts, the Jobs by cache, NVMe usage, and the nodes where model pods wait for a cache (weights.py)
Indexes = tuple[Mapping[str, Any], Mapping[Any, Any], Mapping[str, Any], Mapping[Any, Any]]


def memory(memo: kopf.Memo) -> Memory:
    found: Memory = memo.setdefault("weights_cache", Memory())
    return found


def _with_fsx_claim(
    store: Store, body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, ctx: RenderContext, remembered: Memory
) -> ModelDataCacheConfigSpec:
    """Before Jobs mount an FSx source: its names completed (for the Jobs only: the key stays that of the spec),
    and its PersistentVolume and claim attached to this cache."""
    source = spec.model_source_config
    if render_fsx.storage_of(source) is None:
        return spec
    region = ctx.aws_region or ctx.jumpstart_region
    try:
        source = fsx.completed_source(source, region, remembered.fsx_lookups)
    except ResolutionFailed as failure:
        raise kopf.TemporaryError(failure.message, delay=60) from failure
    storage = render_fsx.storage_of(source)
    assert storage is not None
    cache = owner(body)
    ref = owners.owner_reference(MDCC_KIND, cache.name, cache.uid, controller=False)
    fsx.attach(store, cache.namespace, storage, ref)
    return spec.model_copy(update={"model_source_config": source})


def owner(body: Mapping[str, Any]) -> render_jobs.Owner:
    meta = body["metadata"]
    return render_jobs.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def own_jobs(index: Mapping[Any, Any], owner: render_jobs.Owner, role: str) -> list[planning.PreloadJob]:
    """This cache's Jobs of one role (preload or cleanup) in the Job index, by name."""
    entries: Iterable[render_jobs.IndexedJob] = index.get((owner.namespace, names.label_value(owner.name)), ())
    return sorted((e.job for e in entries if e.role == role and e.owner_uid == owner.uid), key=lambda j: j.name)


def due(body: Mapping[str, Any], memo: kopf.Memo, jobs_index: Mapping[Any, Any], resync_seconds: float) -> bool:
    """Whether a tick should reconcile: this cache's Jobs changed, a retry is due, or the resync interval passed."""
    remembered = memory(memo)
    clock = time.monotonic()
    changed = tuple(own_jobs(jobs_index, owner(body), render_jobs.ROLE_PRELOAD)) != remembered.fingerprint
    retry = remembered.due is not None and clock >= remembered.due
    stale = clock - remembered.last_run >= resync_seconds
    return changed or retry or stale


def retryable_reasons() -> frozenset[str]:
    return frozenset(str(reason) for reason in preload_results.RETRYABLE_REASONS)


def permanent_exit_codes() -> list[int]:
    return sorted(preload_results.PERMANENT_EXIT_CODES.values())


def read_results(
    store: Store, namespace: str, finished: Iterable[planning.PreloadJob]
) -> dict[str, planning.PreloadResult]:
    """Termination messages of finished Jobs' pods (one LIST per Job, only until status has recorded it)."""
    codes = {code: str(reason) for code, reason in preload_results.REASON_BY_EXIT_CODE.items()}
    found: dict[str, planning.PreloadResult] = {}
    for job in finished:
        pods = store.list("v1", "Pod", namespace, label_selector=f"batch.kubernetes.io/controller-uid={job.uid}")
        result = render_jobs.read_result(pods, codes)
        if result is None:
            reason = "Completed" if job.phase == planning.JobPhase.SUCCEEDED else (job.failure_reason or "JobFailed")
            result = planning.PreloadResult(reason=reason, message="no termination message")
        found[job.name] = result
    return found


def _reachable(
    facts: Iterable[nodes.NodeFacts], spec: ModelDataCacheConfigSpec, ctx: RenderContext
) -> tuple[list[nodes.NodeFacts], dict[str, str]]:
    """Nodes a preload Job can be scheduled on (a node tainted for others gets no Job that would wait forever), and
    the unavailable ones (cordoned, NotReady, unreachable, NoExecute: listed in status, never targeted)."""
    tolerated = tolerations.cache_tolerations(ctx.extra_tolerations) if spec.tolerate_all_taints else []
    facts = list(facts)
    unavailable = node_health.unavailable(facts, tolerated)
    return [n for n in facts if n.name in unavailable or tolerations.schedulable(n.taints, tolerated)], unavailable


def stored_status(body: Mapping[str, Any]) -> ModelDataCacheConfigStatus:
    """The cache's status as stored (empty when absent or unreadable)."""
    return handling.stored_status(body, ModelDataCacheConfigStatus) or ModelDataCacheConfigStatus()


def _previous_status(body: Mapping[str, Any], remembered: Memory) -> ModelDataCacheConfigStatus:
    """The stored status, or the one this process wrote last if the body still predates that write."""
    if remembered.written and remembered.written[0] == body["metadata"].get("resourceVersion"):
        return remembered.written[1]
    return stored_status(body)


def write_status(
    store: Store, body: Mapping[str, Any], old: ModelDataCacheConfigStatus, new: ModelDataCacheConfigStatus
) -> bool:
    """Write the cache's status when it changed. True when written."""
    return handling.write_status(store, MDCC_KIND, body, old.to_api(), new.to_api())


def reconcile(
    body: Mapping[str, Any],
    spec: ModelDataCacheConfigSpec,
    memo: kopf.Memo,
    indexes: Indexes,
    *,
    blocking: bool = True,
) -> None:
    """Drive one cache toward: a Job per target node until it is labelled ready, and a truthful status.

    With `blocking=False` (the timer), a reconcile already under way makes this one a no-op.
    """
    if handling.deleting(body):
        return
    lock = handling.lock(memo, body["metadata"]["uid"])
    if not lock.acquire(blocking=blocking):
        return
    try:
        with handling.api_errors("reconciling the weights cache"):
            _reconcile(body, spec, memo.store, memo.settings.render, memory(memo), indexes)
    finally:
        lock.release()


def _reconcile(
    body: Mapping[str, Any],
    spec: ModelDataCacheConfigSpec,
    store: Store,
    ctx: RenderContext,
    remembered: Memory,
    indexes: Indexes,
) -> None:
    node_facts, jobs_index, usage_index, demand_index = indexes
    meta = body["metadata"]
    old = _previous_status(body, remembered)
    refused = hostpaths.refusal(spec.host_path, ctx.allowed_host_paths)
    if refused:  # no Job mounts a root the admin did not allow
        generation = int(meta.get("generation") or 1)
        write_status(store, body, old, hostpaths.refused_status(old, generation, refused, handling.now()))
        return
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, meta["namespace"], ctx.cache_sharing_groups)
    cache = owner(body)
    generation = int(meta.get("generation") or 1)
    preloads = [  # only Jobs named as this operator names them for this key
        j
        for j in own_jobs(jobs_index, cache, render_jobs.ROLE_PRELOAD)
        if j.name == render_jobs.preload_job_name(key, j.node, j.attempt)
    ]
    clock = time.monotonic()
    label = nodelabels.weights_ready_label(key)
    remembered.labelled = labelling.recent(remembered.labelled, clock)
    reachable, unavailable = _reachable(nodes.all_nodes(node_facts), spec, ctx)
    live = labelling.overlay(reachable, label, remembered.labelled)
    results = read_results(store, cache.namespace, planning.unrecorded(preloads, old))
    observed = planning.Observed(
        generation=generation,
        key=key,
        spec=spec,
        status=old,
        nodes=live,
        jobs=preloads,
        results=results,
        retryable_reasons=retryable_reasons(),
        unavailable=unavailable,
        throttle=throttling.Throttle(ctx.preload_concurrency_nodes, ctx.preload_concurrency_percent),
        residents=nvme_usage.residents(live, usage_index, key),
        eviction_policy=nvme_budget.EvictionPolicy(ctx.cache_eviction_policy),
        evicted=nvme_usage.evicted_nodes(live, key),
        demanded=frozenset(demand_index.get((cache.namespace, key), ())),
    )
    now = handling.now()
    plan = planning.plan(observed, now)
    for node, victim in plan.evict:
        if nvme_usage.evict(store, ctx, node, victim, now):
            weights_reporting.event(
                body,
                spec,
                "Normal",
                "CacheEvicted",
                f"evicted {victim.namespace}/{victim.name} (no endpoint references it; least recently used"
                f" {victim.last_used or 'never'}) from node {node} to make room",
            )
    for name in plan.delete:
        store.delete("batch/v1", "Job", name, cache.namespace)
    size = planning.model_size(spec, plan.status)
    job_spec = _with_fsx_claim(store, body, spec, ctx, remembered) if plan.create else spec
    for node, attempt in plan.create:
        request = render_jobs.PreloadRequest(
            owner=cache, key=key, node=node, attempt=attempt, generation=generation, expected_bytes=size
        )
        try:
            signing.apply_job(
                store, render_jobs.preload_job(request, job_spec, ctx, permanent_exit_codes()), key, node, ctx
            )
        except Invalid as error:  # e.g. the Job exists with an older template the index has not shown yet
            log.warning(
                "cache %s/%s: preload Job for node %s not applied: %s", cache.namespace, cache.name, node, error
            )
    by_name = {n.name: n for n in live}
    for node in plan.label:
        if labelling.set_label(store, node, label, nodelabels.READY):
            remembered.labelled[node] = time.monotonic()
            nvme_usage.unmark(store, by_name[node], key)
        # else: the node left; the next reconcile drops it
    if write_status(store, body, old, plan.status):
        remembered.written = (str(meta.get("resourceVersion")), plan.status)
    weights_reporting.report(body, spec, plan, str(old.state) if old.state else None)
    weights_reporting.observe(body, plan.status)
    nvme_usage.export(meta["uid"], plan.status)
    remembered.last_run = clock
    remembered.fingerprint = tuple(preloads)
    remembered.due = clock + plan.requeue_after if plan.requeue_after else None
    if plan.create or plan.delete or plan.label:
        log.info(
            "cache %s/%s: created %d Jobs, deleted %d, labelled %d nodes; %s",
            cache.namespace,
            cache.name,
            len(plan.create),
            len(plan.delete),
            len(plan.label),
            plan.status.message,
        )
