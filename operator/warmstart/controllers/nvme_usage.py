"""Several caches per node: the usage index of live caches, evicting a cache from a node, and the NVMe gauges.

The rules are pure (render/nvme_budget.py); this module feeds them from kopf's indexes and carries out an eviction:
mark the node (annotation naming the evicted cache, so that cache does not preload it again while unreferenced),
remove the cache's ready label and reservation, and run its cleanup Job on the node. The gauges of a node are removed
once no live cache reports it (the node was deleted, or left every cache's targets), so /metrics keeps no stale
series.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus
from warmstart.api.states import NodeCacheState
from warmstart.controllers import metrics
from warmstart.controllers.nodes import NodeFacts
from warmstart.controllers.storage import NotFound, Store
from warmstart.render import jobs as render_jobs
from warmstart.render import keys, nvme_budget
from warmstart.render import weights_plans as planning
from warmstart.render.context import RenderContext


def weights_usage_index(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    uid: str,
    namespace: str,
    name: str,
    meta: Mapping[str, Any],
    memo: kopf.Memo,
    **_: Any,
) -> dict[str, nvme_budget.CacheUsage]:
    """Live caches by content key, with what the NVMe budget needs: size, referenced, last use, nodes filling."""
    try:
        parsed = ModelDataCacheConfigSpec.model_validate(spec)
        observed = ModelDataCacheConfigStatus.model_validate(status or {})
    except ValidationError:
        return {}
    if meta.get("deletionTimestamp"):
        return {}
    key = keys.weights_key_in(
        parsed.model_source_config, parsed.host_path, namespace, memo.settings.render.cache_sharing_groups
    )
    filling = frozenset(
        n.node
        for n in observed.nodes or []
        if n.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING) and n.reason != planning.QUEUED
    )
    usage = nvme_budget.CacheUsage(
        key=key,
        namespace=namespace,
        name=name,
        size_bytes=parsed.model_size_bytes or observed.model_size_bytes,
        referenced=bool(parsed.parent_references),
        last_used=observed.last_used_time or "",
        filling=filling,
        uid=uid,
        spec=parsed,
        source=keys.source_key(parsed.model_source_config),
    )
    return {key: usage}


def residents(
    nodes: Iterable[planning.NodeLike], usage_index: Mapping[str, Any], own_key: str
) -> dict[str, list[nvme_budget.Resident]]:
    """node -> the other caches the operator knows on it (ready, reserved, or filling)."""
    nodes = list(nodes)
    usages = [u for store in usage_index.values() for u in store if isinstance(u, nvme_budget.CacheUsage)]
    reserved = {n.name: nvme_budget.reservations(n.annotations) for n in nodes}
    return nvme_budget.residents_by_node({n.name: n.labels for n in nodes}, usages, own_key, reserved)


def evicted_nodes(nodes: Iterable[NodeFacts], key: str) -> frozenset[str]:
    """Nodes whose evicted annotation names `key`."""
    annotation = nodelabels.weights_evicted_annotation(key)
    return frozenset(n.name for n in nodes if annotation in n.annotations)


def evict(store: Store, ctx: RenderContext, node: str, victim: nvme_budget.Resident, now: dt.datetime) -> bool:
    """Evict one cache from one node: mark the node, remove the ready label, run the cleanup Job. False if gone."""
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {
        "metadata": {
            "annotations": {
                nodelabels.weights_evicted_annotation(victim.key): stamp,
                nodelabels.weights_reserved_annotation(victim.key): None,
            },
            "labels": {nodelabels.weights_ready_label(victim.key): None},
        }
    }
    try:
        store.merge_patch("v1", "Node", node, patch)
    except NotFound:
        return False
    if victim.spec is not None:
        owner = render_jobs.Owner(name=victim.name, namespace=victim.namespace, uid=victim.uid)
        store.apply(render_jobs.cleanup_job(owner, victim.key, node, victim.spec, ctx))
    return True


def unmark(store: Store, node: NodeFacts, key: str) -> None:
    """Drop this cache's evicted annotation from a node it is ready on again."""
    annotation = nodelabels.weights_evicted_annotation(key)
    if annotation in node.annotations:
        try:
            store.merge_patch("v1", "Node", node.name, {"metadata": {"annotations": {annotation: None}}})
        except NotFound:
            pass


_exported_lock = threading.Lock()
_exported: dict[str, frozenset[str]] = {}  # cache uid -> nodes whose gauges that cache set in its last reconcile


def export(uid: str, status: ModelDataCacheConfigStatus) -> None:
    """Per-node NVMe used and free bytes, as this cache's reconcile computed them; drop the series of nodes that no
    cache reports any more."""
    reported: set[str] = set()
    for entry in status.nodes or []:
        if entry.nvme_used_bytes is not None:
            metrics.NODE_NVME_USED_BYTES.labels(node=entry.node).set(entry.nvme_used_bytes)
            reported.add(entry.node)
        if entry.nvme_free_bytes is not None:
            metrics.NODE_NVME_FREE_BYTES.labels(node=entry.node).set(entry.nvme_free_bytes)
            reported.add(entry.node)
    _settle(uid, frozenset(reported))


def forget(uid: str) -> None:
    """A deleted cache: drop the series of the nodes only it reported."""
    _settle(uid, frozenset())


def _settle(uid: str, reported: frozenset[str]) -> None:
    with _exported_lock:
        before = _exported.pop(uid, frozenset())
        if reported:
            _exported[uid] = reported
        still = frozenset().union(*_exported.values())
        for node in before - still:
            for gauge in (metrics.NODE_NVME_USED_BYTES, metrics.NODE_NVME_FREE_BYTES):
                with contextlib.suppress(KeyError):
                    gauge.remove(node)
