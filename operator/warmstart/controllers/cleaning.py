"""Deleting a weights cache: stop its preloads, run cleanup Jobs on the nodes that may hold files, remove the labels.

A cache whose content key another live cache shares keeps its files and labels (the other cache still uses them).
The finalizer waits at most `CLEANUP_WAIT_SECONDS` for the cleanup Jobs, then lets the cache go regardless.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.controllers import nodes, nvme_reserving, preloading, signing, weights_reporting
from warmstart.controllers.storage import Store
from warmstart.render import hostpaths, keys
from warmstart.render import jobs as render_jobs
from warmstart.render import weights_plans as planning
from warmstart.render.context import RenderContext

log = logging.getLogger(__name__)

#: the finalizer waits at most this long for cleanup Jobs
CLEANUP_WAIT_SECONDS = 300.0


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
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, meta["namespace"], ctx.cache_sharing_groups)
    owner = preloading.owner(body)
    sharers = [entry for entry in keys_index.get(key, ()) if entry[2] != owner.uid]
    if sharers:
        log.info(
            "cache %s/%s: key %s is also used by %s; keeping files and labels",
            owner.namespace,
            owner.name,
            key,
            sharers[0][:2],
        )
        return
    label = nodelabels.weights_ready_label(key)
    old = preloading.stored_status(body)
    live = {n.name: n for n in nodes.all_nodes(node_facts)}
    preloads = preloading.own_jobs(jobs_index, owner, render_jobs.ROLE_PRELOAD)
    cleanups = {j.node: j for j in preloading.own_jobs(jobs_index, owner, render_jobs.ROLE_CLEANUP)}
    touched = {n.name for n in live.values() if n.labels.get(label) == nodelabels.READY}
    touched |= {j.node for j in preloads} | {n.node for n in old.nodes or [] if n.attempts}
    holders = sorted(n for n in touched if n in live)
    if hostpaths.refusal(spec.host_path, ctx.allowed_host_paths):
        holders = []  # no cleanup Job mounts a refused root; only the labels go
    message = f"removing the cache from {len(holders)} nodes"
    preloading.write_status(store, body, old, planning.deleting(old, int(meta.get("generation") or 1), message, now))
    for job in preloads:
        if job.phase == planning.JobPhase.RUNNING:
            store.delete("batch/v1", "Job", job.name, owner.namespace)
    started = render_jobs.parse_time(meta.get("deletionTimestamp")) or now
    if (now - started).total_seconds() < CLEANUP_WAIT_SECONDS:
        for node in holders:
            if node not in cleanups:
                signing.apply_job(store, render_jobs.cleanup_job(owner, key, node, spec, ctx), key, node, ctx)
        pending = [n for n in holders if n not in cleanups or cleanups[n].phase == planning.JobPhase.RUNNING]
        if pending:
            raise kopf.TemporaryError(f"waiting for cleanup Jobs on {len(pending)} nodes ({pending[0]}, ...)", delay=2)
    else:
        log.warning(
            "cache %s/%s: cleanup did not finish within %.0f s; releasing",
            owner.namespace,
            owner.name,
            CLEANUP_WAIT_SECONDS,
        )
    failed = sorted(n for n, j in cleanups.items() if j.phase == planning.JobPhase.FAILED and n in live)
    if failed:
        weights_reporting.warn(
            body,
            spec,
            "CleanupFailed",
            f"cleanup Job failed on {len(failed)} nodes ({', '.join(failed[:5])}); files may remain",
        )
    reserved = nodelabels.weights_reserved_annotation(key)
    for name, facts in live.items():
        if label in facts.labels or reserved in facts.annotations:
            nvme_reserving.release(store, name, key, unlabel=True)
    for job in cleanups.values():
        if job.phase != planning.JobPhase.RUNNING:
            store.delete("batch/v1", "Job", job.name, owner.namespace)
