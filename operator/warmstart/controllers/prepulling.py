"""The reconcile of one ModelImageCache: apply the pre-pull DaemonSet, label warm nodes, write status; never block.

It applies the DaemonSet (server-side apply under a deterministic name, so an operator restart never duplicates it),
reads pre-pull pods from a kopf index, sets or removes the nodes' image-ready labels with merge patches, and writes
status only when it changed. `spec.parentReferences` belong to the endpoint controller and are never touched here.
Release (the finalizer) deletes the DaemonSet (garbage collection would too) and removes the labels.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import nodelabels
from warmstart.api.caches import MIC_KIND, ModelImageCacheSpec, ModelImageCacheStatus
from warmstart.api.states import CacheState
from warmstart.controllers import handling, labelling, metrics
from warmstart.controllers.nodes import all_nodes
from warmstart.controllers.storage import StorageError, Store
from warmstart.placement import node_matches
from warmstart.render import daemonsets, image_labels, image_status
from warmstart.render.image_status import PrepullPod


def _all_pods(index: Mapping[Any, Any]) -> list[PrepullPod]:
    return [pod for store in index.values() for pod in store if isinstance(pod, PrepullPod)]


def reconcile(body: kopf.Body, spec: ModelImageCacheSpec, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Bring the DaemonSet, node labels and status in line with the MIC; safe to call any number of times."""
    with handling.lock(memo, body["metadata"]["uid"]), handling.api_errors("reconciling the image cache"):
        _reconcile(body, spec, memo, indexes)


def _reconcile(body: kopf.Body, spec: ModelImageCacheSpec, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    store: Store = memo.store
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = handling.stored_status(body, ModelImageCacheStatus)
    key = daemonsets.cache_key(name, spec)
    owner = daemonsets.Owner(name=name, namespace=namespace, uid=meta["uid"])
    daemonset = store.apply(daemonsets.daemonset(owner, spec, key, memo.settings.render))

    own_id = (namespace, daemonsets.mic_label_value(name))
    everything = _all_pods(indexes["prepull_pods"])
    own = [p for p in everything if (p.namespace, p.mic) == own_id]
    others = [p for p in everything if (p.namespace, p.mic) != own_id]
    nodes = list(all_nodes(indexes["node_facts"]))
    targeted = {n.name for n in nodes if node_matches(n.labels, n.name, spec.node_selector, spec.node_affinity)}
    _relabel(store, key, nodes, own, others, targeted)
    if previous and previous.key and previous.key != key:
        _relabel(store, previous.key, nodes, [], others, set())

    status = image_status.image_status(
        spec, key, meta.get("generation"), daemonset, own, previous, handling.timestamp(handling.now())
    )
    if handling.write_status(store, MIC_KIND, body, previous.to_api() if previous else {}, status.to_api()):
        _announce(body, previous, status)
    _export_metrics(namespace, name, status, indexes.get("image_cache_states"))


def _relabel(
    store: Store, key: str, nodes: list[Any], own: list[PrepullPod], others: list[PrepullPod], targeted: set[str]
) -> None:
    label = nodelabels.image_ready_label(key)
    labeled = {n.name for n in nodes if label in n.labels}
    _patch_labels(store, label, image_labels.label_changes(key, labeled, own, others, targeted))


def _patch_labels(store: Store, label: str, changes: image_labels.LabelChanges) -> None:
    for node, value in changes.items():
        labelling.set_label(store, node, label, value)  # a node that went away needs no label


def _announce(body: kopf.Body, previous: ModelImageCacheStatus | None, status: ModelImageCacheStatus) -> None:
    """Events for a written status: a node that starts failing, and a state change."""
    # a node that starts failing, not every ErrImagePull <-> ImagePullBackOff flip of the kubelet's retries
    seen = {f.node for f in (previous.failures or [])} if previous else set()
    fresh = [f for f in status.failures or [] if f.node not in seen]
    for failure in fresh:
        metrics.IMAGE_PULL_FAILURES.labels(reason=failure.reason).inc()
    if fresh:
        nodes = ", ".join(f"{f.node} ({f.reason})" for f in fresh[:5])
        kopf.warn(body, reason="ImagePullFailed", message=f"{status.image}: {nodes}"[:1000])
    if (previous.state if previous else None) != status.state:
        ready = status.state == CacheState.READY
        kopf.event(
            body,
            type="Normal" if ready or not status.failures else "Warning",
            reason=str(status.state),
            message=(status.message or "")[:1000],
        )


def _export_metrics(
    namespace: str, name: str, status: ModelImageCacheStatus, states: Mapping[Any, Any] | None, gone: bool = False
) -> None:
    if gone:
        for gauge in (metrics.CACHE_READY_NODES, metrics.CACHE_TARGET_NODES):
            with contextlib.suppress(KeyError):
                gauge.remove(MIC_KIND, namespace, name)
    else:
        metrics.CACHE_READY_NODES.labels(MIC_KIND, namespace, name).set(status.ready_nodes)
        metrics.CACHE_TARGET_NODES.labels(MIC_KIND, namespace, name).set(status.target_nodes)
    if states is None:
        return
    counts: Counter[str] = Counter()
    for key, store in states.items():
        if key == (namespace, name):
            continue
        counts.update(str(s) for s in store)
    if not gone and status.state is not None:
        counts[status.state.value] += 1
    for state in CacheState:
        metrics.CACHES.labels(MIC_KIND, state.value).set(counts.get(state.value, 0))


def release(body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Finalizer: delete the DaemonSet, then remove the labels no other MIC of the same key still backs."""
    store: Store = memo.store
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = handling.stored_status(body, ModelImageCacheStatus)
    stale = {previous.key} if previous and previous.key else set()
    with contextlib.suppress(kopf.PermanentError):  # an invalid spec must not block deletion
        stale.add(daemonsets.cache_key(name, handling.spec(body, ModelImageCacheSpec)))
    own_id = (namespace, daemonsets.mic_label_value(name))
    with handling.lock(memo, meta["uid"]), handling.api_errors("releasing the image cache", finalizing=True):
        with contextlib.suppress(StorageError):
            handling.patch_status(store, MIC_KIND, body, {"state": CacheState.DELETING.value})
        store.delete("apps/v1", "DaemonSet", daemonsets.daemonset_name(name), namespace)
        others = [p for p in _all_pods(indexes["prepull_pods"]) if (p.namespace, p.mic) != own_id]
        for key in stale:
            # ask the API, not the node index: a label set a moment ago must not be missed
            label = nodelabels.image_ready_label(key)
            labeled = {str(n["metadata"]["name"]) for n in store.list("v1", "Node", label_selector=label)}
            _patch_labels(store, label, image_labels.label_changes(key, labeled, [], others, set()))
    _export_metrics(
        namespace, name, ModelImageCacheStatus(state=CacheState.DELETING), indexes.get("image_cache_states"), gone=True
    )
    kopf.info(body, reason="Released", message="pre-pull DaemonSet deleted and node labels removed")
