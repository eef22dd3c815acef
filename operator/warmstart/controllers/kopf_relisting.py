"""Objects deleted while a watch was down leave kopf's indexes when the watch lists again.

kopf (1.45) changes an index only on watch events. When a watch stream stops and lists again (a paused standby
replica resumes after its peer died; a watch restarts after "410 Gone"), every listed object is indexed again, but an
object deleted meanwhile sends no event: kopf keeps it in the indexes for good, as it was before. A node scaled in
during a takeover would stay a target of every cache, Ready in their status, for as long as the replica runs.

`Relisting` remembers the objects each watch has shown (its listing, then its ADDED, MODIFIED and DELETED events);
when a listing ends, the objects it no longer shows are discarded from the indexes of that resource. The wrapper of
kopf's `continuous_watch` (installed by kopf_tuning.install) finds the operator's `Relisting` in a context variable
that `activate` sets before kopf starts its tasks, so several operators in one process (tests) keep theirs apart.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, cast

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs import references
from kopf._core.engines import indexing

log = logging.getLogger(__name__)

#: kopf's key of an object in its indexes: (namespace, name, uid)
Key = tuple[Any, Any, Any]
#: one watch stream: a resource in a namespace (None: cluster-wide)
Stream = tuple[references.Resource, references.Namespace]


def object_key(raw: Mapping[str, Any]) -> Key:
    """kopf's index key of a raw object (indexing.OperatorIndexers.make_key)."""
    meta = raw.get("metadata") or {}
    return (meta.get("namespace"), meta.get("name"), meta.get("uid"))


class Relisting:
    """Per operator: the objects each watch stream has shown, and the indexes each resource feeds."""

    def __init__(self, registry: kopf.OperatorRegistry, indexers: indexing.OperatorIndexers) -> None:
        self._handlers = list(registry._indexing.get_all_handlers())
        self._indexers = indexers
        self._shown: dict[Stream, set[Key]] = {}

    def listed(self, stream: Stream, keys: Iterable[Key]) -> list[Key]:
        """A listing of `stream` ended showing `keys`: the objects shown before and not now, discarded from the
        resource's indexes."""
        shown = set(keys)
        gone = sorted(self._shown.get(stream, set()) - shown, key=repr)
        self._shown[stream] = shown
        resource = stream[0]
        for handler in self._handlers:
            if handler.selector is not None and handler.selector.check(resource) and handler.id in self._indexers:
                for key in gone:
                    self._indexers[handler.id].discard(key)
        return gone

    def seen(self, stream: Stream, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A watch event after the listing."""
        shown = self._shown.setdefault(stream, set())
        if event_type == "DELETED":
            shown.discard(object_key(raw))
        else:
            shown.add(object_key(raw))


_current: contextvars.ContextVar[Relisting | None] = contextvars.ContextVar("warmstart_relisting", default=None)
_kopf_continuous_watch = watching.continuous_watch


def activate(relisting: Relisting) -> None:
    """Make `relisting` the one of the kopf tasks this task starts from now on (they copy its context)."""
    _current.set(relisting)


async def continuous_watch(
    *,
    settings: kopf.OperatorSettings,
    resource: references.Resource,
    namespace: references.Namespace,
    operator_pause_waiter: Any,
) -> AsyncIterator[Any]:
    """kopf's `continuous_watch` (one listing, then watch events until paused or restarted), telling the operator's
    `Relisting` what it shows."""
    stream = cast(
        AsyncGenerator[Any, None],
        _kopf_continuous_watch(
            settings=settings, resource=resource, namespace=namespace, operator_pause_waiter=operator_pause_waiter
        ),
    )
    relisting = _current.get()
    listing: list[Key] | None = []
    async with contextlib.aclosing(stream):
        async for item in stream:
            if relisting is not None and item is watching.Bookmark.LISTED and listing is not None:
                gone = relisting.listed((resource, namespace), listing)
                if gone:
                    where = f"in {namespace}" if namespace else "cluster-wide"
                    log.info("%s %s: %d gone since the last listing, forgotten", resource.plural, where, len(gone))
                listing = None
            elif relisting is not None and isinstance(item, dict):
                if item.get("type") is None and listing is not None:
                    listing.append(object_key(item["object"]))
                elif listing is None and item.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    relisting.seen((resource, namespace), item["type"], item["object"])
            yield item


def install() -> None:
    """Use the wrapper for the watch streams kopf starts from now on."""
    watching.continuous_watch = continuous_watch
