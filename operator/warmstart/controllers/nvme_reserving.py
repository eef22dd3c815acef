"""Reserve a weights cache's NVMe bytes on a node atomically, so two caches that start at once cannot both fit.

The capacity check (render/nvme_budget.py) reads the other caches from kopf's indexes, which lag the API by a watch
event: two caches reconciled in the same second each see the node without the other and would both start a Job.
So before a cache's first Job on a node, the operator writes a reservation annotation,
`cache.inference.sagemaker.aws.amazon.com/reserved-weights-<key>: <bytes>`, with the node's resourceVersion as a
precondition. Of two writers that read the same node, the API server takes one write and answers the other 409
Conflict; that one reads the node again and checks again, now counting the first reservation. Without room it gets
no reservation and the plan is made again from the node as read (the node is then Failed/InsufficientCapacity).

The reservation goes with the ready label's patch (the label then counts the bytes), when the cache no longer fills
the node (Failed, not targeted), when it is evicted, and when the cache is deleted. A reservation only counts for a
live cache, so one left behind frees its bytes when its cache is gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.api.states import NodeCacheState
from warmstart.controllers import nodes, nvme_usage
from warmstart.controllers.storage import Conflict, NotFound, Store, Unavailable
from warmstart.render import nvme_budget
from warmstart.render import weights_plans as planning

#: reads and conditional writes of one node before giving up for this reconcile (each 409 means another writer won)
ATTEMPTS = 5


def reserve(
    store: Store, node: str, key: str, size: int, usage_index: Mapping[str, Any], evicting: Collection[str] = ()
) -> nodes.NodeFacts | None:
    """Reserve `size` bytes for `key` on `node`: None when reserved (or nothing to reserve: capacity unknown, node
    gone); else the node as read, whose reservations and labels show why it does not fit. `evicting`: keys this
    reconcile evicts from the node, not counted."""
    annotation = nodelabels.weights_reserved_annotation(key)
    for _ in range(ATTEMPTS):
        body = store.get("v1", "Node", node)
        if body is None:
            return None
        meta = body["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        facts = nodes.node_facts(node, labels, annotations, body)[node]
        if annotation in annotations:
            return None
        capacity = placement.nvme_capacity_bytes(labels.get(nodelabels.INSTANCE_TYPE), annotations)
        if capacity is None:
            return None
        others = [r for r in nvme_usage.residents([facts], usage_index, key).get(node, []) if r.key not in evicting]
        if not nvme_budget.fit(size, capacity, others, nvme_budget.EvictionPolicy.NEVER).fits:
            return facts
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {annotation: str(size)}}}
        try:
            store.merge_patch("v1", "Node", node, patch)
        except NotFound:
            return None
        except Conflict:
            continue
        return None
    raise Unavailable(f"node {node} changed {ATTEMPTS} times while reserving NVMe for cache {key}")


def label_ready(store: Store, node: str, key: str, content: str | None = None) -> bool:
    """Label the node ready for `key` and drop its reservation in one patch (the label counts the bytes from now);
    with `content`, also the node's content annotation of the key. False when the node is gone."""
    annotations: dict[str, str | None] = {nodelabels.weights_reserved_annotation(key): None}
    if content:
        annotations[nodelabels.weights_content_annotation(key)] = content
    patch = {
        "metadata": {"labels": {nodelabels.weights_ready_label(key): nodelabels.READY}, "annotations": annotations}
    }
    try:
        store.merge_patch("v1", "Node", node, patch)
    except NotFound:
        return False
    return True


def held(facts: Iterable[nodes.NodeFacts], key: str) -> list[str]:
    """Nodes whose annotations hold a reservation for `key`."""
    annotation = nodelabels.weights_reserved_annotation(key)
    return sorted(n.name for n in facts if annotation in n.annotations)


def release(store: Store, node: str, key: str, *, unlabel: bool = False) -> None:
    """Drop the reservation of `key` from the node, and with `unlabel` its ready label and content annotation (nothing
    when the node is gone)."""
    patch: dict[str, Any] = {"metadata": {"annotations": {nodelabels.weights_reserved_annotation(key): None}}}
    if unlabel:
        patch["metadata"]["labels"] = {nodelabels.weights_ready_label(key): None}
        patch["metadata"]["annotations"][nodelabels.weights_content_annotation(key)] = None
    try:
        store.merge_patch("v1", "Node", node, patch)
    except NotFound:
        pass


#: plans made again in one reconcile when reservations are refused (each refusal turns a node InsufficientCapacity)
RESERVE_PASSES = 4


def reserved_plan(
    store: Store, observed: planning.Observed, usage_index: Mapping[str, Any], now: Any
) -> tuple[planning.Observed, planning.Plan]:
    """The plan, with NVMe reserved atomically on every node it starts a Job on.

    A node refused a reservation is planned again as read from the API, whose reservations the index has not shown
    yet: the plan then finds it full (or evicts for it). A Job is never created on a node without its reservation."""
    plan = planning.plan(observed, now)
    for _ in range(RESERVE_PASSES):
        size = planning.model_size(observed.spec, observed.status)
        if not size or not plan.create:
            return observed, plan
        evicting: dict[str, set[str]] = {}
        for node, victim in plan.evict:
            evicting.setdefault(node, set()).add(victim.key)
        refused = {}
        for node, _attempt in plan.create:
            fresh = reserve(store, node, observed.key, size, usage_index, evicting.get(node, ()))
            if fresh is not None:
                refused[node] = fresh
        if not refused:
            return observed, plan
        seen = [refused.get(n.name, n) for n in observed.nodes]
        residents = nvme_usage.residents(seen, usage_index, observed.key)
        observed = dataclasses.replace(observed, nodes=seen, residents=residents)
        plan = planning.plan(observed, now)
    plan.create = []  # still refused after every pass: no Job this reconcile; the next one plans again
    return observed, plan


def release_unused(store: Store, plan: planning.Plan, key: str, live: Iterable[nodes.NodeFacts]) -> None:
    """Drop this cache's reservations on nodes it no longer fills (Failed, Queued, not targeted); a node labelled
    ready had its reservation dropped with the label."""
    filling = {
        e.node
        for e in plan.status.nodes or []
        if e.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING) and e.reason != planning.QUEUED
    }
    filling |= {node for node, _attempt in plan.create}
    for node in held(live, key):
        if node not in filling and node not in plan.label:
            release(store, node, key)
