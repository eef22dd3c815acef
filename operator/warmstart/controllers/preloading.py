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
from warmstart.api.states import NodeCacheState
from warmstart.controllers import (
    fanout,
    fsx,
    handling,
    labelling,
    nodes,
    nvme_reserving,
    nvme_usage,
    signing,
    source_throttling,
    weights_reporting,
)
from warmstart.controllers.resolving import ResolutionFailed
from warmstart.controllers.storage import FIELD_MANAGER, Invalid, NotFound, StorageError, Store
from warmstart.render import (
    cache_volumes,
    hostpaths,
    keys,
    names,
    node_health,
    nvme_budget,
    owners,
    throttling,
    tolerations,
)
from warmstart.render import fsx as render_fsx
from warmstart.render import jobs as render_jobs
from warmstart.render import weights_plans as planning
from warmstart.render import weights_summaries as summaries
from warmstart.render.context import RenderContext
from warmstart.render.weights_observations import QUEUED

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
    #: Job name -> the uid the API server gave the Job this process applied (a tenant cannot make a Job of that uid)
    job_uids: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the last pass left nothing that only a later pass could move on (see `settled`)
    quiet: bool = False
    #: what the last pass read of the nodes and of the model pods' demand, as `due` compares it
    instance_types: frozenset[str] | None = None
    node_changes: tuple[int, ...] = ()
    #: the node changes when `due` last decided to reconcile (the pass that starts next reads at least those)
    seen_changes: tuple[int, ...] = ()
    demand_key: tuple[str, str] = ("", "")
    demanded: frozenset[str] = frozenset()


#: node facts, the Jobs by cache, NVMe usage, the nodes where model pods wait for a cache, and node names by instance
#: type (weights.py)
Indexes = tuple[Mapping[str, Any], Mapping[Any, Any], Mapping[str, Any], Mapping[Any, Any], Mapping[str, Any]]


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
    try:
        source = fsx.completed_source(source, str(body["metadata"]["namespace"]), ctx.fsx_file_systems)
    except ResolutionFailed as failure:
        raise kopf.TemporaryError(failure.message, delay=60) from failure
    storage = render_fsx.storage_of(source)
    assert storage is not None
    cache = owner(body)
    ref = owners.owner_reference(MDCC_KIND, cache.name, cache.uid, controller=False)
    fsx.attach(store, cache.namespace, storage, ref)
    return spec.model_copy(update={"model_source_config": source})


#: the field manager of the pods the Job controller creates (kube-controller-manager's)
JOB_CONTROLLER = "kube-controller-manager"
#: the Warning Event of one node's failed step (the reconcile of the other nodes goes on)
NODE_STEP_FAILED = summaries.NODE_STEP_FAILED
#: when a node's step failed, the next reconcile comes this soon
NODE_RETRY_SECONDS = 30.0


def owner(body: Mapping[str, Any]) -> render_jobs.Owner:
    meta = body["metadata"]
    return render_jobs.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def own_jobs(index: Mapping[Any, Any], owner: render_jobs.Owner, role: str) -> list[planning.PreloadJob]:
    """This cache's Jobs of one role (preload or cleanup) in the Job index, by name."""
    return sorted((e.job for e in _entries(index, owner, role)), key=lambda j: j.name)


def _entries(index: Mapping[Any, Any], owner: render_jobs.Owner, role: str) -> list[render_jobs.IndexedJob]:
    entries: Iterable[render_jobs.IndexedJob] = index.get((owner.namespace, names.label_value(owner.name)), ())
    return [e for e in entries if e.role == role and e.owner_uid == owner.uid]


def trusted_preloads(
    index: Mapping[Any, Any], owner: render_jobs.Owner, key: str, job_uids: Mapping[str, str]
) -> list[planning.PreloadJob]:
    """This cache's preload Jobs that the operator made, judged by what a tenant cannot forge.

    Labels, annotations, owner references and names are anyone's to write. A Job counts only if the operator's
    field manager alone wrote it, it has the operator's name for its key, node and attempt, and its uid is the one
    the API server gave the Job this process applied. A Job of the right name but unknown uid (a restart, or a
    tenant's Job) is applied again: the operator's own Job is then recognised; a tenant's, whose template differs,
    is refused by the API server, never counts, and is deleted so that the operator's own Job can take its name."""
    return sorted(
        (
            e.job
            for e in _entries(index, owner, render_jobs.ROLE_PRELOAD)
            if e.job.name == render_jobs.preload_job_name(key, e.job.node, e.job.attempt)
            and e.managers == {FIELD_MANAGER}
            and job_uids.get(e.job.name) == e.job.uid
        ),
        key=lambda j: j.name,
    )


#: a settled cache (`settled`) whose nodes and demand did not change resyncs this many times less often
QUIET_RESYNC_FACTOR = 6


def due(
    body: Mapping[str, Any],
    memo: kopf.Memo,
    jobs_index: Mapping[Any, Any],
    resync_seconds: float,
    node_changes: Mapping[str, Any],
    demand_index: Mapping[Any, Any],
) -> bool:
    """Whether a tick should reconcile: this cache's Jobs changed, a retry is due, or the resync interval passed.

    A cache whose last pass left it settled resyncs every QUIET_RESYNC_FACTOR intervals instead, unless a node of
    its instance types changed (the node informer counts the changes) or model pods' demand for it did: a fleet of
    caches waiting for their Jobs costs a tick's lookups, not a reconcile each every interval."""
    remembered = memory(memo)
    clock = time.monotonic()
    changed = tuple(own_jobs(jobs_index, owner(body), render_jobs.ROLE_PRELOAD)) != remembered.fingerprint
    retry = remembered.due is not None and clock >= remembered.due
    since = clock - remembered.last_run
    stale = since >= resync_seconds
    if stale and remembered.quiet and since < resync_seconds * QUIET_RESYNC_FACTOR:
        moved = nodes.changes_of(node_changes, remembered.instance_types) != remembered.node_changes
        demanded = frozenset(demand_index.get(remembered.demand_key, ())) != remembered.demanded
        stale = moved or demanded
    if changed or retry or stale:  # what the pass will read of the nodes, taken before it reads them
        remembered.seen_changes = nodes.changes_of(node_changes, remembered.instance_types)
        return True
    return False


def settled(plan: planning.Plan, failed: Mapping[str, str]) -> bool:
    """Whether a pass left nothing that only a later pass moves on: it acted on no node and every node's entry is
    Ready or waits for its own Job (whose events wake the cache). A queued, failed or rechecked node depends on other
    caches' usage, the source's throttle or a clock: those keep the regular resync."""
    if plan.create or plan.delete or plan.label or failed:
        return False
    return all(
        entry.state == NodeCacheState.READY
        or (entry.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING) and entry.reason != QUEUED)
        for entry in plan.status.nodes or []
    )


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
        result = render_jobs.read_result(render_jobs.pods_of(pods, job, JOB_CONTROLLER), codes)
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
        source = keys.source_key(spec.model_source_config)
        with handling.api_errors("reconciling the weights cache"), source_throttling.serialized(source):
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
    node_facts, jobs_index, usage_index, demand_index, type_index = indexes
    remembered.node_changes = remembered.seen_changes
    meta = body["metadata"]
    old = _previous_status(body, remembered)
    refused = hostpaths.refusal(spec.host_path, ctx.allowed_host_paths)
    if refused:  # no Job mounts a root the admin did not allow
        generation = int(meta.get("generation") or 1)
        write_status(store, body, old, hostpaths.refused_status(old, generation, refused, handling.now()))
        return
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, meta["namespace"], ctx.cache_sharing_groups)
    source = keys.source_key(spec.model_source_config)
    cache = owner(body)
    generation = int(meta.get("generation") or 1)
    # the Jobs as this pass sees them, taken before it reads them: a Job that changes while the pass runs differs
    # from this fingerprint, so the next tick reconciles again (taken at the end, it would hide that change until the
    # resync interval)
    fingerprint = tuple(own_jobs(jobs_index, cache, render_jobs.ROLE_PRELOAD))
    preloads = trusted_preloads(jobs_index, cache, key, remembered.job_uids)
    clock = time.monotonic()
    label = nodelabels.weights_ready_label(key)
    remembered.labelled = labelling.recent(remembered.labelled, clock)
    demanded = frozenset(demand_index.get((cache.namespace, key), ()))
    # only the nodes this cache can target: a reconcile reads its own nodes, not the whole fleet
    instance_types = nodes.targeted_instance_types(spec.node_selector, spec.node_affinity)
    remembered.instance_types, remembered.demand_key, remembered.demanded = (
        instance_types,
        (cache.namespace, key),
        demanded,
    )
    candidates = nodes.candidates(node_facts, type_index, instance_types, demanded)
    matching = planning.target_nodes(spec, candidates, demanded)
    reachable, unavailable = _reachable(matching, spec, ctx)
    live = labelling.overlay(reachable, label, remembered.labelled)
    unseen = labelling.ready_unseen(old.nodes or [], live, label)
    if unseen:  # Ready in status, unlabelled in the view: the live node decides whether it is preloaded again
        live = labelling.confirmed(store, live, label, unseen)
        log.info(
            "cache %s/%s: %d nodes Ready in status without the label in the watch's view; read them: %d labelled",
            cache.namespace,
            cache.name,
            len(unseen),
            len(unseen) - len(labelling.ready_unseen(old.nodes or [], live, label)),
        )
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
        source_busy=source_throttling.busy(source, cache.uid, usage_index),
        residents=nvme_usage.residents(live, usage_index, key),
        eviction_policy=nvme_budget.EvictionPolicy(ctx.cache_eviction_policy),
        evicted=nvme_usage.evicted_nodes(live, key),
        demanded=demanded,
        prove_each_reader=ctx.cache_access == cache_volumes.CacheAccess.CSI,
    )
    now = handling.now()
    observed, plan = nvme_reserving.reserved_plan(store, observed, usage_index, now)
    failed = _act_on_nodes(body, spec, store, ctx, remembered, plan, key, live, now)
    nvme_reserving.release_unused(store, plan, key, live)
    source_throttling.record(source, cache.uid, plan.status)
    plan.status = summaries.with_failed_steps(observed, plan.status, failed, now)
    if write_status(store, body, old, plan.status):
        remembered.written = (str(meta.get("resourceVersion")), plan.status)
    weights_reporting.report(body, spec, plan, str(old.state) if old.state else None)
    weights_reporting.observe(body, plan.status)
    nvme_usage.export(meta["uid"], plan.status)
    remembered.last_run = clock
    remembered.fingerprint = fingerprint
    remembered.quiet = settled(plan, failed)
    requeue = min(filter(None, (plan.requeue_after, NODE_RETRY_SECONDS if failed else None)), default=None)
    remembered.due = clock + requeue if requeue else None
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


class _OnNode:
    """One node's step of a reconcile: an API error there is reported (log, Warning Event) and the other nodes go on."""

    def __init__(self, body: Mapping[str, Any], spec: ModelDataCacheConfigSpec, node: str, what: str) -> None:
        self.body, self.spec, self.node, self.what = body, spec, node, what
        self.failed: str | None = None  # why, when the step failed

    def __enter__(self) -> _OnNode:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> bool:
        if error is None or not isinstance(error, StorageError) or isinstance(error, NotFound):
            return False
        meta = self.body["metadata"]
        message = f"{self.what} on node {self.node} failed ({type(error).__name__}: {error}); the other nodes go on"
        self.failed = message
        log.warning("cache %s/%s: %s", meta["namespace"], meta["name"], message)
        weights_reporting.event(self.body, self.spec, "Warning", NODE_STEP_FAILED, message)
        return True


def _act_on_nodes(
    body: Mapping[str, Any],
    spec: ModelDataCacheConfigSpec,
    store: Store,
    ctx: RenderContext,
    remembered: Memory,
    plan: planning.Plan,
    key: str,
    live: list[nodes.NodeFacts],
    now: Any,
) -> dict[str, str]:
    """Carry out the plan node by node: evictions, Job deletes and creates, labels. The nodes whose step failed,
    with why."""
    cache = owner(body)
    generation = int(body["metadata"].get("generation") or 1)
    failed: dict[str, str] = {}
    for node, victim in plan.evict:
        with _OnNode(body, spec, node, f"evicting {victim.namespace}/{victim.name}") as step:
            if nvme_usage.evict(store, ctx, node, victim, now):
                weights_reporting.event(
                    body,
                    spec,
                    "Normal",
                    "CacheEvicted",
                    f"evicted {victim.namespace}/{victim.name} (no endpoint references it; least recently used"
                    f" {victim.last_used or 'never'}) from node {node} to make room",
                )
        if step.failed:
            failed[node] = step.failed
    fanout.each(plan.delete, lambda name: store.delete("batch/v1", "Job", name, cache.namespace))
    size = planning.model_size(spec, plan.status)
    job_spec = _with_fsx_claim(store, body, spec, ctx, remembered) if plan.create else spec

    def create(item: tuple[str, int]) -> str | None:
        node, attempt = item
        request = render_jobs.PreloadRequest(
            owner=cache, key=key, node=node, attempt=attempt, generation=generation, expected_bytes=size
        )
        manifest = render_jobs.preload_job(request, job_spec, ctx, permanent_exit_codes())
        with _OnNode(body, spec, node, "applying the preload Job") as step:
            try:
                applied = signing.apply_job(store, manifest, key, node, ctx)
            except Invalid:
                # a Job of that name with another template: a tenant's, or one of an older operator. It never
                # counts; deleting it lets the next reconcile create the operator's own.
                store.delete("batch/v1", "Job", manifest["metadata"]["name"], cache.namespace)
                raise
            if render_jobs.made_by(applied, FIELD_MANAGER):
                remembered.job_uids[applied["metadata"]["name"]] = applied["metadata"]["uid"]
        return step.failed

    by_name = {n.name: n for n in live}

    def mark_ready(node: str) -> str | None:
        with _OnNode(body, spec, node, "labelling the node cache-ready") as step:
            if nvme_reserving.label_ready(store, node, key, plan.content.get(node)):
                remembered.labelled[node] = time.monotonic()
                nvme_usage.unmark(store, by_name[node], key)
            # else: the node left; the next reconcile drops it
        return step.failed

    # bounded concurrency (controllers/fanout.py): a wave of Jobs or labels does not wait round trip after round trip
    for (node, _), why in zip(plan.create, fanout.each(plan.create, create), strict=True):
        if why:
            failed[node] = why
    for node, why in zip(plan.label, fanout.each(plan.label, mark_ready), strict=True):
        if why:
            failed[node] = why
    republished = sorted(set(plan.content) - set(plan.label))  # new content on a node already labelled

    def mark_content(node: str) -> str | None:
        with _OnNode(body, spec, node, "recording the key's new content on the node") as step:
            labelling.set_annotation(store, node, nodelabels.weights_content_annotation(key), plan.content[node])
        return step.failed

    for node, why in zip(republished, fanout.each(republished, mark_content), strict=True):
        if why:
            failed[node] = why
    return failed
