"""kopf handlers for ModelImageCache: apply the pre-pull DaemonSet, label warm nodes, write status; never block.

One level-based reconcile serves create, update, resume and the drift-correcting timer. It applies the DaemonSet
(server-side apply under a deterministic name, so an operator restart never duplicates it), reads pre-pull pods from
a kopf index, sets or removes the nodes' image-ready labels with merge patches, and writes status only when it
changed. `spec.parentReferences` belong to the endpoint controller and are never touched here. Deletion runs behind
the operator's finalizer: it deletes the DaemonSet (garbage collection would too) and removes the labels.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import kopf
import pydantic

from warmstart.api import API_VERSION, GROUP, VERSION, nodelabels
from warmstart.api.caches import MIC_KIND, MIC_PLURAL, ModelImageCacheSpec, ModelImageCacheStatus
from warmstart.api.states import CacheState
from warmstart.controllers import metrics
from warmstart.controllers.nodes import all_nodes
from warmstart.controllers.storage import Forbidden, Invalid, NotFound, Store, StorageError
from warmstart.placement import node_matches
from warmstart.render import daemonsets, image_labels, image_status, labels, priority
from warmstart.render.image_status import PrepullPod

TIMER_SECONDS = float(os.environ.get("WARMSTART_RESYNC_SECONDS", "10"))

_locks_guard = threading.Lock()


# --- indexes ---------------------------------------------------------------------------------------------------------


@kopf.index("", "v1", "pods", labels={labels.MIC_LABEL: kopf.PRESENT, labels.COMPONENT: daemonsets.COMPONENT})  # type: ignore[arg-type]
def prepull_pods(namespace: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], PrepullPod]:
    """(namespace, MIC label value) -> the pre-pull pods of that MIC."""
    pod = image_status.prepull_pod(body)
    return {(namespace, pod.mic): pod}


@kopf.index(GROUP, VERSION, MIC_PLURAL)  # type: ignore[arg-type]
def image_cache_states(namespace: str, name: str, status: Mapping[str, Any], **_: Any) -> dict[tuple[str, str], str]:
    """(namespace, name) -> status.state of every MIC, for the warmstart_caches gauge."""
    return {(namespace, name): str(status.get("state") or CacheState.PENDING.value)}


# --- handlers --------------------------------------------------------------------------------------------------------


@kopf.on.startup()
def ensure_priority_class(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Create the pre-pull PriorityClass if it is missing (the chart normally installs it): pods naming a missing
    PriorityClass are rejected by admission, and the DaemonSet would never get a pod."""
    store: Store = memo.store
    name = memo.settings.render.prepull_priority_class
    try:
        if store.get("scheduling.k8s.io/v1", "PriorityClass", name) is None:
            store.apply(priority.priority_class(name))
            logger.info(f"created PriorityClass {name}")
    except Forbidden:
        logger.warning(f"PriorityClass {name} cannot be read or created (RBAC); install it with the chart")
    except StorageError as error:
        logger.warning(f"PriorityClass {name} not ensured: {error}")


@kopf.on.resume(GROUP, VERSION, MIC_PLURAL)
@kopf.on.create(GROUP, VERSION, MIC_PLURAL)
@kopf.on.update(GROUP, VERSION, MIC_PLURAL)
def reconcile_on_change(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    reconcile(body, memo, indexes)


@kopf.timer(GROUP, VERSION, MIC_PLURAL, interval=TIMER_SECONDS, initial_delay=TIMER_SECONDS)
def reconcile_on_timer(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    if not body.get("metadata", {}).get("deletionTimestamp"):
        reconcile(body, memo, indexes)


@kopf.on.delete(GROUP, VERSION, MIC_PLURAL)
def release_on_delete(body: kopf.Body, memo: kopf.Memo, **indexes: Any) -> None:
    release(body, memo, indexes)


# --- reconcile -------------------------------------------------------------------------------------------------------


def _lock(memo: kopf.Memo) -> threading.Lock:
    """One lock per MIC (the memo is per object): the timer and a change handler never interleave."""
    with _locks_guard:
        lock: threading.Lock = memo.setdefault("image_cache_lock", threading.Lock())
        return lock


@contextlib.contextmanager
def _storage_errors(action: str) -> Iterator[None]:
    try:
        yield
    except Invalid as error:
        raise kopf.PermanentError(f"{action}: the API server rejected it: {error}") from error
    except StorageError as error:
        raise kopf.TemporaryError(f"{action}: {error}", delay=5) from error


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _spec(body: Mapping[str, Any]) -> ModelImageCacheSpec:
    try:
        return ModelImageCacheSpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as error:
        raise kopf.PermanentError(f"invalid spec: {error}") from error


def _previous(body: Mapping[str, Any]) -> ModelImageCacheStatus | None:
    try:
        return ModelImageCacheStatus.model_validate(body.get("status") or {}) if body.get("status") else None
    except pydantic.ValidationError:
        return None


def _all_pods(index: Mapping[Any, Any]) -> list[PrepullPod]:
    return [pod for store in index.values() for pod in store if isinstance(pod, PrepullPod)]


def reconcile(body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Bring the DaemonSet, node labels and status in line with the MIC; safe to call any number of times."""
    with _lock(memo), _storage_errors("reconciling the image cache"):
        _reconcile(body, memo, indexes)


def _reconcile(body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    store: Store = memo.store
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    spec = _spec(body)
    previous = _previous(body)
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

    status = image_status.image_status(spec, key, meta.get("generation"), daemonset, own, previous, _now())
    _write_status(store, body, previous, status)
    _export_metrics(namespace, name, status, indexes.get("image_cache_states"))


def _relabel(store: Store, key: str, nodes: list[Any], own: list[PrepullPod], others: list[PrepullPod], targeted: set[str]) -> None:
    label = nodelabels.image_ready_label(key)
    labeled = {n.name for n in nodes if label in n.labels}
    _patch_labels(store, label, image_labels.label_changes(key, labeled, own, others, targeted))


def _patch_labels(store: Store, label: str, changes: image_labels.LabelChanges) -> None:
    for node, value in changes.items():
        with contextlib.suppress(NotFound):  # the node went away
            store.merge_patch("v1", "Node", node, {"metadata": {"labels": {label: value}}})


def _write_status(store: Store, body: kopf.Body, previous: ModelImageCacheStatus | None, status: ModelImageCacheStatus) -> None:
    """Patch /status only when it changed; post events on state changes and new pull failures."""
    old = previous.to_api() if previous else {}
    new = status.to_api()
    if old == new:
        return
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update(new)
    meta = body["metadata"]
    store.merge_patch(API_VERSION, MIC_KIND, meta["name"], {"status": patch}, meta["namespace"], subresource="status")

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
        kopf.event(body, type="Normal" if ready or not status.failures else "Warning", reason=str(status.state), message=(status.message or "")[:1000])


def _export_metrics(namespace: str, name: str, status: ModelImageCacheStatus, states: Mapping[Any, Any] | None, gone: bool = False) -> None:
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


# --- deletion --------------------------------------------------------------------------------------------------------


def release(body: kopf.Body, memo: kopf.Memo, indexes: Mapping[str, Any]) -> None:
    """Finalizer: delete the DaemonSet, then remove the labels no other MIC of the same key still backs."""
    store: Store = memo.store
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = _previous(body)
    stale = {previous.key} if previous and previous.key else set()
    with contextlib.suppress(kopf.PermanentError):  # an invalid spec must not block deletion
        stale.add(daemonsets.cache_key(name, _spec(body)))
    own_id = (namespace, daemonsets.mic_label_value(name))
    with _lock(memo), _storage_errors("releasing the image cache"):
        with contextlib.suppress(StorageError):
            store.merge_patch(API_VERSION, MIC_KIND, name, {"status": {"state": CacheState.DELETING.value}}, namespace, subresource="status")
        store.delete("apps/v1", "DaemonSet", daemonsets.daemonset_name(name), namespace)
        others = [p for p in _all_pods(indexes["prepull_pods"]) if (p.namespace, p.mic) != own_id]
        for key in stale:
            # ask the API, not the node index: a label set a moment ago must not be missed
            label = nodelabels.image_ready_label(key)
            labeled = {str(n["metadata"]["name"]) for n in store.list("v1", "Node", label_selector=label)}
            _patch_labels(store, label, image_labels.label_changes(key, labeled, [], others, set()))
    _export_metrics(namespace, name, ModelImageCacheStatus(state=CacheState.DELETING), indexes.get("image_cache_states"), gone=True)
    kopf.info(body, reason="Released", message="pre-pull DaemonSet deleted and node labels removed")
