"""Status that follows events: a change to what an object's status reads wakes that object's reconcile at once.

What wakes what:

- a model Deployment (its rollout progress) or a model pod -> its endpoint;
- a cache's status (ModelDataCacheConfig, ModelImageCache) -> every endpoint that references the cache;
- a preload or cleanup Job -> its ModelDataCacheConfig;
- a pre-pull pod (a DaemonSet pod becoming ready) or its DaemonSet's status -> its ModelImageCache.

Each object's reconcile runs in one loop (:func:`follow`, a kopf daemon) that waits for a wake-up or its interval,
whichever comes first. The interval stays as the safety net for what no watched event reports (a node's labels
drifting, a retry falling due).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from typing import Any

import kopf

from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL, MIC_KIND, MIC_PLURAL
from warmstart.controllers import handling
from warmstart.controllers.settings import OperatorSettings
from warmstart.render import daemonsets, labels, names

#: (kind in lower case, namespace, name as a label value): what the objects' labels and references give
Key = tuple[str, str, str]

#: after a wake-up, the loop waits this long so that a burst of events (a Job and its pod, a Deployment and its
#: ReplicaSet's pods) makes one reconcile
SETTLE_SECONDS = 0.05


def endpoint_key(kind: str, namespace: str, name: str) -> Key:
    """The wake-up key of an InferenceEndpointConfig or JumpStartModel (its children's labels carry its name so)."""
    return (kind.lower(), namespace, names.label_value(name))


def weights_cache_key(namespace: str, name: str) -> Key:
    """The wake-up key of a ModelDataCacheConfig (its Jobs' label carries its name so)."""
    return (MDCC_KIND.lower(), namespace, names.label_value(name))


def image_cache_key(namespace: str, name: str) -> Key:
    """The wake-up key of a ModelImageCache (its pre-pull pods' label carries its name, shortened)."""
    return (MIC_KIND.lower(), namespace, daemonsets.mic_label_value(name))


class Wakeups:
    """One asyncio event per followed object, and the last status seen of each cache (to wake on changes only).

    Shared by every object's handlers through the operator's memo; used from the event loop only.
    """

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}
        self._statuses: dict[str, str] = {}

    def event(self, wanted: Key) -> asyncio.Event:
        return self._events.setdefault(wanted, asyncio.Event())

    def forget(self, wanted: Key) -> None:
        self._events.pop(wanted, None)

    def wake(self, keys: Iterable[Key]) -> int:
        """Set the events of the followed objects among `keys`; how many were followed."""
        woken = 0
        for wanted in keys:
            event = self._events.get(wanted)
            if event is not None:
                event.set()
                woken += 1
        return woken

    def status_changed(self, uid: str, status: Mapping[str, Any] | None) -> bool:
        """Whether `status` differs from the last one seen for `uid` (and remember it); None forgets `uid`."""
        if status is None:
            return self._statuses.pop(uid, None) is not None
        digest = json.dumps(status, sort_keys=True, default=str)
        changed = self._statuses.get(uid) != digest
        self._statuses[uid] = digest
        return changed


def deployment_owner(namespace: str, meta: Mapping[str, Any]) -> list[Key]:
    """The endpoint whose model Deployment this is (its controller reference)."""
    refs = meta.get("ownerReferences") or []
    return [
        endpoint_key(str(r.get("kind", "")), namespace, str(r.get("name", ""))) for r in refs if r.get("controller")
    ]


def endpoint_pod_owner(namespace: str, pod_labels: Mapping[str, str]) -> list[Key]:
    """The endpoint of a model pod, from the labels the operator puts on its pods."""
    name, kind = pod_labels.get(labels.ENDPOINT_LABEL), pod_labels.get(labels.ENDPOINT_KIND_LABEL)
    return [(kind, namespace, name)] if name and kind else []


def cache_parents(namespace: str, spec: Mapping[str, Any]) -> list[Key]:
    """The endpoints that reference a cache."""
    return [
        endpoint_key(str(p.get("kind", "")), namespace, str(p.get("name", "")))
        for p in spec.get("parentReferences") or []
        if p.get("kind") and p.get("name")
    ]


def job_cache(namespace: str, job_labels: Mapping[str, str]) -> list[Key]:
    """The ModelDataCacheConfig of a preload or cleanup Job."""
    name = job_labels.get(labels.MDCC_LABEL)
    return [(MDCC_KIND.lower(), namespace, name)] if name else []


def prepull_pod_cache(namespace: str, pod_labels: Mapping[str, str]) -> list[Key]:
    """The ModelImageCache of a pre-pull pod."""
    name = pod_labels.get(labels.MIC_LABEL)
    return [(MIC_KIND.lower(), namespace, name)] if name else []


async def _until(stopped: kopf.DaemonStopped) -> None:
    """Return when kopf stops the daemon (its flag is awaited through `wait()`, never directly)."""
    await stopped.wait()


async def follow(
    wakeups: Wakeups,
    wanted: Key,
    interval: float,
    stopped: kopf.DaemonStopped,
    step: Callable[[], None],
    logger: kopf.Logger,
    executor: Executor | None = None,
    due: Callable[[], bool] | None = None,
) -> None:
    """Run `step` (in a thread of `executor`, else asyncio's default one) whenever `wanted` is woken, and at least
    every `interval` seconds, until `stopped`; when `due` is given, only the turns it answers True for (it runs on
    the event loop, so a turn with nothing to do takes no thread).

    A failing step is logged (on the object: kopf posts warnings as Events) and runs again on the next wake-up or
    interval, as a failing timer would.
    """
    wake = wakeups.event(wanted)
    stop = asyncio.ensure_future(_until(stopped))
    try:
        while not stopped:
            waiter = asyncio.ensure_future(wake.wait())
            await asyncio.wait({waiter, stop}, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if stopped:
                return
            if wake.is_set():
                await asyncio.sleep(SETTLE_SECONDS)
                wake.clear()
            if due is not None and not due():
                continue
            try:
                await in_thread(step, executor)
            except (kopf.TemporaryError, kopf.PermanentError) as error:
                logger.warning(f"Refreshing failed, will retry: {error}")
            except Exception:  # one object's failure must not end its loop
                logger.exception("Refreshing failed with an exception, will retry")
    finally:
        stop.cancel()
        wakeups.forget(wanted)


async def in_thread(call: Callable[[], None], executor: Executor | None = None) -> None:
    """Run `call` in a thread of `executor` (None: asyncio's default one) with the caller's context variables (kopf's
    Events and per-object logger rely on them), as asyncio.to_thread does."""
    await asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, call)


#: what a status loop runs: the object's reconcile, given its live body, the memo and the kopf indexes
Reconcile = Callable[[kopf.Body, kopf.Memo, dict[str, Any]], None]
#: whether a turn of a status loop has anything to do (same arguments; runs on the event loop, so cheap and pure)
Due = Callable[[kopf.Body, kopf.Memo, dict[str, Any]], bool]


def status_loop(
    key_of: Callable[[str, str], Key],
    reconcile: Reconcile,
    interval_of: Callable[[kopf.Memo], float],
    executor: Executor | None = None,
    due: Due | None = None,
) -> Callable[..., Awaitable[None]]:
    """A kopf daemon that runs `reconcile` (in a thread of `executor`) whenever the object (its key from namespace and
    name) is woken, and every `interval_of(memo)` seconds at the latest, on the turns `due` allows (all without it);
    never on an object being deleted."""

    async def follow_status(
        body: kopf.Body,
        memo: kopf.Memo,
        stopped: kopf.DaemonStopped,
        namespace: str,
        name: str,
        logger: kopf.Logger,
        **indexes: Any,
    ) -> None:
        def step() -> None:
            if not handling.deleting(body):
                reconcile(body, memo, indexes)

        def turn_due() -> bool:
            return due is None or due(body, memo, indexes)

        await follow(
            memo.wakeups, key_of(namespace, name), interval_of(memo), stopped, step, logger, executor, turn_due
        )

    return follow_status


def _wakeups(memo: kopf.Memo) -> Wakeups:
    found: Wakeups = memo.wakeups
    return found


async def wake_endpoint_of_deployment(namespace: str, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    _wakeups(memo).wake(deployment_owner(namespace, meta))


async def wake_endpoint_of_pod(namespace: str, labels: Mapping[str, str], memo: kopf.Memo, **_: Any) -> None:
    _wakeups(memo).wake(endpoint_pod_owner(namespace, labels))


async def wake_cache_of_job(namespace: str, labels: Mapping[str, str], memo: kopf.Memo, **_: Any) -> None:
    _wakeups(memo).wake(job_cache(namespace, labels))


async def wake_cache_of_prepull_pod(namespace: str, labels: Mapping[str, str], memo: kopf.Memo, **_: Any) -> None:
    """A pre-pull pod or its DaemonSet changed (both carry the cache's label)."""
    _wakeups(memo).wake(prepull_pod_cache(namespace, labels))


async def wake_parents_of_cache(
    type: str | None,  # kopf's name for the watch event's type
    namespace: str,
    uid: str,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A cache's status changed (or the cache went away): its endpoints show it."""
    wakeups = _wakeups(memo)
    if wakeups.status_changed(uid, None if type == "DELETED" else dict(status)):
        wakeups.wake(cache_parents(namespace, spec))


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the event handlers that wake the objects whose status an event changes."""
    del settings
    endpoint_children = {labels.ENDPOINT_LABEL: kopf.PRESENT}
    prepull_pods = {labels.MIC_LABEL: kopf.PRESENT, labels.COMPONENT: daemonsets.COMPONENT}
    cache_jobs = {labels.MDCC_LABEL: kopf.PRESENT}
    wirings: list[tuple[tuple[str, str, str], Mapping[str, Any] | None, Callable[..., Awaitable[None]]]] = [
        (("apps", "v1", "deployments"), endpoint_children, wake_endpoint_of_deployment),
        (("", "v1", "pods"), endpoint_children, wake_endpoint_of_pod),
        (("batch", "v1", "jobs"), cache_jobs, wake_cache_of_job),
        (("", "v1", "pods"), prepull_pods, wake_cache_of_prepull_pod),
        (("apps", "v1", "daemonsets"), prepull_pods, wake_cache_of_prepull_pod),  # its numberReady: the status's count
        ((GROUP, VERSION, MDCC_PLURAL), None, wake_parents_of_cache),
        ((GROUP, VERSION, MIC_PLURAL), None, wake_parents_of_cache),
    ]
    for (group, version, plural), selector, handler in wirings:
        kopf.on.event(group, version, plural, labels=selector, registry=registry)(handler)
