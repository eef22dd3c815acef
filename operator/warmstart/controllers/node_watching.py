"""The operator's node informer: one list, then one watch of every node, in one thread; no kopf worker per node.

kopf (1.45) handles each watch event in a worker of that object, which it spawns again for every event that arrives
after the last one exited. A fleet's nodes send events that change nothing the operator reads: every status heartbeat
(kwok renews each node's status every 10-20 minutes, a kubelet's Ready condition moves its heartbeat time), so kopf's
per-event cost grew with the fleet while it was idle. The informer reads the same watch, keeps only what the
controllers read of a node (`nodes.NodeFacts`: labels, annotations, readiness, taints, unschedulable, deletion), and
drops an event that leaves those unchanged after parsing it.

- **Listing.** Pages of `LIST_PAGE` nodes; the listing's resourceVersion starts the watch. The first listing ends
  before kopf starts (`wait_synced`), so no handler reads an empty fleet: the indexes are waited for once.
- **Watching.** From that resourceVersion, with bookmarks (the resourceVersion moves on while nothing changes), for
  `WATCH_SECONDS` per request, then again from the last resourceVersion seen.
- **Expiry.** A watch whose resourceVersion is too old ("410 Gone", as an ERROR event or a status) lists again; the
  new listing replaces the indexes whole, so a node changed or deleted while the watch was down is seen as it is now.
- **Readers** (handler threads, status loops on the event loop) read immutable snapshots that the informer thread
  swaps in whole (`NodeSnapshot`), through live views in kopf's index shape (`LiveIndex`); a change copies the
  outer dict of the index by name (about 30 microseconds for 5,000 nodes), never the facts.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, KeysView, ValuesView
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kopf._cogs.structs import ids
from kopf._core.engines import indexing
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from prometheus_client import Counter
from urllib3.exceptions import HTTPError

from warmstart.api.nodelabels import INSTANCE_TYPE
from warmstart.controllers import nodes
from warmstart.controllers.nodes import NodeFacts

log = logging.getLogger(__name__)

#: nodes per page of a listing
LIST_PAGE = 500
#: seconds one watch request lasts (the API server ends it; the informer continues from the last resourceVersion)
WATCH_SECONDS = 300
#: seconds to wait before a new request after a failed one, doubling up to the last
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)

NODE_EVENTS = Counter(
    "warmstart_node_events",
    "Node watch events the operator's informer received, by what they changed of what the controllers read",
    ["outcome"],
)
NODE_LISTINGS = Counter("warmstart_node_listings", "Listings of every node by the operator's informer (start, expiry)")

Key = TypeVar("Key")
Value = TypeVar("Value")


class LiveIndex(MappingABC[Key, tuple[Value, ...]], Generic[Key, Value]):
    """A read-only view in kopf's index shape (key -> values) of whatever snapshot `read` returns at each call."""

    def __init__(self, read: Callable[[], MappingABC[Key, tuple[Value, ...]]]) -> None:
        self._read = read

    def __getitem__(self, key: Key) -> tuple[Value, ...]:
        return self._read()[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __contains__(self, key: object) -> bool:
        return key in self._read()

    def keys(self) -> KeysView[Key]:
        return self._read().keys()

    def values(self) -> ValuesView[tuple[Value, ...]]:
        """The values of one snapshot (a plain Mapping's values would mix a snapshot's keys with the next's)."""
        return self._read().values()


@dataclass(frozen=True)
class NodeSnapshot:
    """The node indexes at one moment; never changed once built (the informer builds the next one)."""

    by_name: dict[str, tuple[NodeFacts]] = field(default_factory=dict)
    by_type: dict[str, tuple[str, ...]] = field(default_factory=dict)
    by_ready_label: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: instance type -> (how many changes its nodes had,); nodes.ANY_TYPE counts every node's
    changes: dict[str, tuple[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, facts: list[NodeFacts], previous: NodeSnapshot | None = None) -> NodeSnapshot:
        """The indexes of these nodes (a listing); after `previous`, every instance type counts one more change."""
        by_type: dict[str, list[str]] = {}
        by_label: dict[str, list[str]] = {}
        for fact in facts:
            itype = fact.labels.get(INSTANCE_TYPE)
            if itype:
                by_type.setdefault(itype, []).append(fact.name)
            for label in nodes.ready_labels(fact):
                by_label.setdefault(label, []).append(fact.name)
        before = previous.changes if previous else {}
        changes = {t: (before.get(t, (0,))[0] + 1,) for t in {*before, *by_type, nodes.ANY_TYPE}}
        return cls(
            by_name={f.name: (f,) for f in facts},
            by_type={k: tuple(sorted(v)) for k, v in by_type.items()},
            by_ready_label={k: tuple(sorted(v)) for k, v in by_label.items()},
            changes=changes,
        )

    def with_node(self, name: str, new: NodeFacts | None) -> NodeSnapshot | None:
        """The snapshot with `name` set to `new` (None: deleted); None when nothing the controllers read changed."""
        found = self.by_name.get(name)
        old = found[0] if found else None
        if old == new:
            return None
        by_name = dict(self.by_name)
        if new is None:
            by_name.pop(name, None)
        else:
            by_name[name] = (new,)
        old_type = old.labels.get(INSTANCE_TYPE) if old else None
        new_type = new.labels.get(INSTANCE_TYPE) if new else None
        by_type = self.by_type
        if old_type != new_type:
            by_type = _moved(by_type, name, old_type, new_type)
        old_labels = nodes.ready_labels(old) if old else frozenset()
        new_labels = nodes.ready_labels(new) if new else frozenset()
        by_label = self.by_ready_label
        for label in old_labels ^ new_labels:
            gone, came = (label, None) if label in old_labels else (None, label)
            by_label = _moved(by_label, name, gone, came)
        changes = dict(self.changes)
        for itype in {t for t in (old_type, new_type, nodes.ANY_TYPE) if t is not None}:
            changes[itype] = (changes.get(itype, (0,))[0] + 1,)
        return NodeSnapshot(by_name, by_type, by_label, changes)


def _moved(
    index: dict[str, tuple[str, ...]], name: str, old: str | None, new: str | None
) -> dict[str, tuple[str, ...]]:
    """A copy of `index` with `name` moved from key `old` to key `new` (None: absent)."""
    result = dict(index)
    if old is not None:
        left = tuple(n for n in result.get(old, ()) if n != name)
        if left:
            result[old] = left
        else:
            result.pop(old, None)
    if new is not None:
        result[new] = tuple(sorted({*result.get(new, ()), name}))
    return result


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class NodeInformer:
    """Lists and watches every node in one thread; readers take `snapshot` or the views of `indexes`."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._snapshot = NodeSnapshot()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    @property
    def snapshot(self) -> NodeSnapshot:
        return self._snapshot

    def indexes(self) -> dict[str, LiveIndex[Any, Any]]:
        """The node indexes by the names the handlers read them under (nodes.NODE_FACTS, ...)."""
        return {
            nodes.NODE_FACTS: LiveIndex(lambda: self._snapshot.by_name),
            nodes.NODES_BY_INSTANCE_TYPE: LiveIndex(lambda: self._snapshot.by_type),
            nodes.NODES_BY_READY_LABEL: LiveIndex(lambda: self._snapshot.by_ready_label),
            nodes.NODE_CHANGES: LiveIndex(lambda: self._snapshot.changes),
        }

    def start(self) -> None:
        """Start the informer's thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="warmstart-node-informer", daemon=True)
            self._thread.start()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until the first listing is in the indexes; whether it is."""
        return self._synced.wait(timeout)

    def stop(self) -> None:
        """End the watch (its connection is shut) and the thread."""
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except (HTTPError, OSError):  # already closed: nothing to end
                log.debug("the node watch was already closed", exc_info=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)

    def run(self) -> None:
        """List, then watch until stopped; list again when the watch expires; retry failed requests with a backoff."""
        since: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if since is None:
                    since = self.list_all()
                    self._synced.set()
                since = self.watch(since)
                failures = 0
            except Expired:
                log.info("the node watch expired (410): listing every node again")
                since = None
            except (ApiException, HTTPError, OSError, ValueError, RuntimeError) as error:  # the thread outlives them
                if self._stop.is_set():
                    return
                delay = BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)]
                failures += 1
                log.warning("node informer: %s: %s; again in %.1f s", type(error).__name__, error, delay)
                if failures >= len(BACKOFF_SECONDS):
                    since = None  # a watch that keeps failing may be on a resourceVersion gone for good
                self._stop.wait(delay)

    def list_all(self) -> str:
        """List every node, replace the indexes with what the listing shows; the listing's resourceVersion."""
        found: list[NodeFacts] = []
        token: str | None = None
        while True:
            params: list[tuple[str, Any]] = [("limit", LIST_PAGE)]
            if token:
                params.append(("continue", token))
            page = json.loads(self._get(params, timeout=60.0).data)
            found.extend(nodes.facts_of(item) for item in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
        self._snapshot = NodeSnapshot.of(found, self._snapshot)
        NODE_LISTINGS.inc()
        version: str = page["metadata"]["resourceVersion"]
        log.info("node informer: %d nodes listed at resourceVersion %s", len(found), version)
        return version

    def watch(self, since: str) -> str:
        """One watch request from `since` until the API server ends it (or `stop`); the last resourceVersion seen.
        Raises Expired when `since` is too old."""
        params: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", since),
            ("timeoutSeconds", WATCH_SECONDS),
        ]
        response = self._get(params, timeout=WATCH_SECONDS + 30.0)
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                since = self.apply(json.loads(line), since)
        finally:
            self._response = None
            response.release_conn()
        return since

    def apply(self, event: MappingABC[str, Any], since: str) -> str:
        """Apply one watch event to the indexes; the resourceVersion to continue from. Raises Expired on a 410."""
        kind, body = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if body.get("code") == 410:
                raise Expired(str(body.get("message", "")))
            raise RuntimeError(f"watch error: {body.get('message', body)}")
        version = str((body.get("metadata") or {}).get("resourceVersion") or since)
        if kind == "BOOKMARK":
            NODE_EVENTS.labels(outcome="bookmark").inc()
            return version
        name = str((body.get("metadata") or {}).get("name", ""))
        updated = self._snapshot.with_node(name, None if kind == "DELETED" else nodes.facts_of(body))
        NODE_EVENTS.labels(outcome="unchanged" if updated is None else "changed").inc()
        if updated is not None:
            self._snapshot = updated
        return version

    def _get(self, params: list[tuple[str, Any]], *, timeout: float) -> Any:
        try:
            return self._api.call_api(
                "/api/v1/nodes",
                "GET",
                query_params=params,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=(10.0, timeout),
            )
        except ApiException as error:
            if error.status == 410:
                raise Expired(str(error.reason)) from error
            raise


class _Exposed(indexing.OperatorIndexer):
    """An entry among kopf's indexers that shows one of the informer's indexes to every handler (kopf passes its
    indexes as keyword arguments); kopf's own index updates, which visit every entry, pass it by."""

    def __init__(self, view: LiveIndex[Any, Any]) -> None:
        self.index = view  # type: ignore[assignment]  # kopf's Index shape, read-only

    def discard(self, key: indexing.Key) -> None:
        del key

    def replace(self, key: indexing.Key, obj: object) -> None:
        del key, obj


def expose(informer: NodeInformer, indexers: indexing.OperatorIndexers) -> None:
    """Show the informer's indexes to the handlers among kopf's, under nodes.NODE_FACTS and the other names."""
    for name, view in informer.indexes().items():
        indexers[ids.HandlerId(name)] = _Exposed(view)
