"""kopf wiring of ModelDataCacheConfig: its indexes and handlers, each a call into preloading or cleaning.

Level-based: `preloading.reconcile` runs on create, update and resume, and from each cache's status loop, which a Job
event wakes at once (controllers/waking.py) and which ticks every second besides: it reconciles when the cache's Jobs
changed in the index, a retry is due, or `resync_seconds` passed (node joins, leaves and label drift are seen then).
Deletion runs behind the operator's finalizer (`cleaning.finalize`).

Reconciles of weights caches run in threads of their own (`CACHE_THREADS`), not in kopf's handler threads nor in
asyncio's default ones, which the endpoints' handlers and status loops use: when a fleet of caches warms up at once,
an endpoint's change still finds a free thread.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
from pydantic import ValidationError

from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL, ModelDataCacheConfigSpec
from warmstart.controllers import (
    cleaning,
    fsx,
    handling,
    nodes,
    nvme_usage,
    preloading,
    source_throttling,
    waking,
    weights_reporting,
)
from warmstart.controllers.settings import OperatorSettings
from warmstart.render import cache_volumes, keys, labels
from warmstart.render import jobs as render_jobs

IndexKey = tuple[str, str]

TICK_SECONDS = 1.0

#: threads that reconcile weights caches (their create/update/resume handlers and their status loops)
CACHE_THREADS = 6
_cache_threads = ThreadPoolExecutor(max_workers=CACHE_THREADS, thread_name_prefix="warmstart-cache")

#: the kopf indexes a cache's reconcile reads, in the order of `preloading.Indexes`
INDEX_NAMES = ("node_facts", "weights_job_index", "weights_usage_index", "csi_demand_index", "nodes_by_instance_type")


def weights_job_index(
    body: kopf.Body, namespace: str, meta: Mapping[str, Any], **_: Any
) -> dict[IndexKey, render_jobs.IndexedJob]:
    """Preload and cleanup Jobs by (namespace, cache name)."""
    return {(namespace, meta["labels"][labels.MDCC_LABEL]): render_jobs.read_job(body)}


def weights_key_index(
    spec: Mapping[str, Any], uid: str, namespace: str, name: str, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any
) -> dict[str, tuple[str, str, str]]:
    """Live caches by content key: caches with one key (in one namespace, or public, or in one trust group) share
    node labels and files.

    Returns {} (not None, which kopf would take as "keep the old entry") for caches being deleted.
    """
    try:
        parsed = ModelDataCacheConfigSpec.model_validate(spec)
    except ValidationError:
        return {}
    if meta.get("deletionTimestamp"):
        return {}
    groups = memo.settings.render.cache_sharing_groups
    return {
        keys.weights_key_in(parsed.model_source_config, parsed.host_path, namespace, groups): (namespace, name, uid)
    }


def csi_demand_index(namespace: str, spec: Mapping[str, Any], **_: Any) -> dict[IndexKey, str]:
    """Nodes where a model pod reads a weights cache through the CSI driver, by (namespace, key).

    Such a pod waits (the driver answers UNAVAILABLE) until its node holds the cache, so that node becomes a target
    of the cache even when the targeting does not name it: a cold node gets its preload Job, as the init container
    would have downloaded there with cache access hostPath.
    """
    node = spec.get("nodeName")
    if not node:
        return {}
    found = {}
    for volume in spec.get("volumes") or []:
        csi = volume.get("csi") or {}
        attributes = csi.get("volumeAttributes") or {}
        if csi.get("driver") == cache_volumes.DRIVER and attributes.get(cache_volumes.ACCESS_ATTRIBUTE) == "read":
            found[(namespace, str(attributes.get(cache_volumes.KEY_ATTRIBUTE, "")))] = str(node)
    return found


async def reconcile_weights_cache(
    body: kopf.Body,
    memo: kopf.Memo,
    node_facts: kopf.Index[Any, Any],
    weights_job_index: kopf.Index[Any, Any],
    weights_usage_index: kopf.Index[Any, Any],
    csi_demand_index: kopf.Index[Any, Any],
    nodes_by_instance_type: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Create, update and resume: reconcile now, in the caches' own threads."""
    if handling.deleting(body):
        return
    spec = handling.spec(body, ModelDataCacheConfigSpec)
    indexes = (node_facts, weights_job_index, weights_usage_index, csi_demand_index, nodes_by_instance_type)
    await waking.in_thread(functools.partial(preloading.reconcile, body, spec, memo, indexes), _cache_threads)


def _due(body: kopf.Body, memo: kopf.Memo, indexes: dict[str, Any]) -> bool:
    """Whether this tick reconciles: this cache's Jobs changed in the index (their events wake the loop:
    controllers/waking.py), a retry is due, or the resync interval passed. Asked on the event loop every tick, so a
    fleet of idle caches takes no thread."""
    return preloading.due(
        body,
        memo,
        indexes["weights_job_index"],
        memo.settings.resync_seconds,
        indexes[nodes.NODE_CHANGES],
        indexes["csi_demand_index"],
    )


def _reconcile_in_loop(body: kopf.Body, memo: kopf.Memo, indexes: dict[str, Any]) -> None:
    """The status loop's step, on the ticks `_due` allows."""
    spec = handling.spec(body, ModelDataCacheConfigSpec)
    preloading.reconcile(body, spec, memo, tuple(indexes[n] for n in INDEX_NAMES), blocking=False)


def delete_weights_cache(
    body: kopf.Body,
    memo: kopf.Memo,
    node_facts: kopf.Index[Any, Any],
    weights_job_index: kopf.Index[Any, Any],
    weights_key_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Finalizer: remove the files (cleanup Jobs on the nodes that hold them), then the node labels."""
    with (
        handling.lock(memo, body["metadata"]["uid"]),
        handling.api_errors("removing the weights cache", finalizing=True),
    ):
        cleaning.finalize(
            body, memo.store, memo.settings.render, node_facts, weights_job_index, weights_key_index, handling.now()
        )
        fsx.release(memo.store, body["metadata"]["namespace"], body["metadata"]["uid"])
    weights_reporting.forget(body)
    nvme_usage.forget(body["metadata"]["uid"])
    source_throttling.forget(body["metadata"]["uid"])


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the ModelDataCacheConfig indexes and handlers."""
    del settings  # the tick is fixed; it reads memo.settings.resync_seconds on each run
    kopf.index("batch", "v1", "jobs", labels={labels.MDCC_LABEL: kopf.PRESENT}, registry=registry)(weights_job_index)  # type: ignore[arg-type]
    kopf.index(GROUP, VERSION, MDCC_PLURAL, registry=registry)(weights_key_index)  # type: ignore[arg-type]
    model_pods = {labels.COMPONENT: "model-server"}
    kopf.index("", "v1", "pods", labels=model_pods, registry=registry)(csi_demand_index)  # type: ignore[arg-type]
    kopf.index(GROUP, VERSION, MDCC_PLURAL, registry=registry)(nvme_usage.weights_usage_index)  # type: ignore[arg-type]
    for on in (kopf.on.create, kopf.on.update, kopf.on.resume):
        on(GROUP, VERSION, MDCC_PLURAL, registry=registry)(reconcile_weights_cache)  # type: ignore[arg-type]
    follow_status = waking.status_loop(
        waking.weights_cache_key, _reconcile_in_loop, lambda _: TICK_SECONDS, _cache_threads, _due
    )
    kopf.daemon(GROUP, VERSION, MDCC_PLURAL, id="follow-status", registry=registry)(follow_status)
    kopf.on.delete(GROUP, VERSION, MDCC_PLURAL, registry=registry)(delete_weights_cache)  # type: ignore[arg-type]
