"""The warm-up throttle across namespaces: the preloads of one source under way, whichever cache started them.

Two tenants that cache the same model get two caches (a key includes its access scope), each with its own throttle
limit; counted apart, they would each start `limit` preloads and double the load on the storage backend. So a cache
may start a preload only while its limit exceeds the preloads under way of every cache of its source
(keys.source_key: the source spec alone), in any namespace.

Reconciles of the caches of one source run one at a time in this process (a lock per source), and each records the
nodes it left filling, so the next counts them at once, before the watch brings that status back. A cache this process
has not reconciled since it started counts from its status in the usage index (controllers/nvme_usage.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from warmstart.api.caches import ModelDataCacheConfigStatus
from warmstart.api.states import NodeCacheState
from warmstart.render import nvme_budget
from warmstart.render import weights_plans as planning

_lock = threading.Lock()
_by_source: dict[str, threading.Lock] = {}
#: cache uid -> (its source, the nodes its last reconcile left filling)
_filling: dict[str, tuple[str, frozenset[str]]] = {}


@contextmanager
def serialized(source: str) -> Iterator[None]:
    """Hold the lock of `source` (reconciles of caches of other sources go on)."""
    with _lock:
        lock = _by_source.setdefault(source, threading.Lock())
    with lock:
        yield


def busy(source: str, uid: str, usage_index: Mapping[str, Any]) -> int:
    """Preloads under way of the other live caches of `source`."""
    counted: dict[str, frozenset[str]] = {}
    for store in usage_index.values():
        for usage in store:
            if isinstance(usage, nvme_budget.CacheUsage) and usage.source == source and usage.uid != uid:
                counted[usage.uid] = usage.filling
    with _lock:
        for other in counted:
            recorded = _filling.get(other)
            if recorded is not None and recorded[0] == source:
                counted[other] = recorded[1]
    return sum(len(nodes) for nodes in counted.values())


def record(source: str, uid: str, status: ModelDataCacheConfigStatus) -> None:
    """The nodes a reconcile of cache `uid` left filling (a Job started or running, not queued)."""
    filling = frozenset(
        n.node
        for n in status.nodes or []
        if n.state in (NodeCacheState.PENDING, NodeCacheState.DOWNLOADING) and n.reason != planning.QUEUED
    )
    with _lock:
        _filling[uid] = (source, filling)


def forget(uid: str) -> None:
    """A deleted cache fills nothing."""
    with _lock:
        _filling.pop(uid, None)
