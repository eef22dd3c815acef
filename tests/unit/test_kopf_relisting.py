"""kopf's indexes forget objects that a re-list no longer shows (deleted while the watch was down), and nothing else.

Real kopf objects (registry, index handlers, indexers); the stream is kopf's own listing protocol: events of type
None, then `Bookmark.LISTED`, then watch events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import watching
from kopf._cogs.structs import references
from kopf._core.engines import indexing

from warmstart.controllers import kopf_relisting

NODES = references.Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
PODS = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)


def _names(name: str, **_: Any) -> dict[str, str]:
    return {name: name}


def _body(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}}


def _operator() -> tuple[kopf_relisting.Relisting, indexing.OperatorIndexers]:
    registry = kopf.OperatorRegistry()
    kopf.index("", "v1", "nodes", registry=registry, id="nodes")(_names)
    kopf.index("", "v1", "pods", registry=registry, id="pods")(_names)
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    return kopf_relisting.Relisting(registry, indexers), indexers


def _index(indexers: indexing.OperatorIndexers, body: dict[str, Any]) -> None:
    """What kopf's indexing does for an event: every handler whose resource it is, replaced."""
    handler_id = "nodes" if body["metadata"]["namespace"] is None else "pods"
    key = indexers.make_key(kopf.Body(body))
    indexers[kopf.HandlerId(handler_id)].replace(key, {body["metadata"]["name"]: body["metadata"]["name"]})


def _held(indexers: indexing.OperatorIndexers, handler_id: str) -> set[str]:
    return set(indexers[kopf.HandlerId(handler_id)].index)


def test_a_relist_forgets_the_nodes_it_no_longer_shows_and_keeps_the_rest_and_other_resources() -> None:
    relisting, indexers = _operator()
    for body in (_body("a"), _body("b"), _body("c"), _body("p", "ns")):
        _index(indexers, body)
    stream = (NODES, None)
    first = [kopf_relisting.object_key(_body(n)) for n in ("a", "b", "c")]
    assert relisting.listed(stream, first) == []  # the first listing: nothing known before it
    relisting.seen(stream, "ADDED", _body("d"))
    _index(indexers, _body("d"))
    relisting.seen(stream, "DELETED", _body("c"))
    indexers.discard(kopf.Body(_body("c")))  # what kopf does on that event
    gone = relisting.listed(stream, [kopf_relisting.object_key(_body(n)) for n in ("a",)])
    assert gone == [kopf_relisting.object_key(_body("b")), kopf_relisting.object_key(_body("d"))]
    assert _held(indexers, "nodes") == {"a"}
    assert _held(indexers, "pods") == {"p"}


def test_streams_of_one_resource_in_two_namespaces_are_kept_apart() -> None:
    relisting, indexers = _operator()
    for body in (_body("p1", "one"), _body("p2", "two")):
        _index(indexers, body)
    relisting.listed((PODS, "one"), [kopf_relisting.object_key(_body("p1", "one"))])
    relisting.listed((PODS, "two"), [kopf_relisting.object_key(_body("p2", "two"))])
    assert relisting.listed((PODS, "one"), []) == [kopf_relisting.object_key(_body("p1", "one"))]
    assert _held(indexers, "pods") == {"p2"}


def _kopf_stream(items: list[Any]) -> Any:
    async def stream(**_: Any) -> AsyncIterator[Any]:
        for item in items:
            yield item

    return stream


async def _drain(relisting: kopf_relisting.Relisting | None) -> list[Any]:
    if relisting is not None:
        kopf_relisting.activate(relisting)
    return [
        item
        async for item in kopf_relisting.continuous_watch(
            settings=kopf.OperatorSettings(), resource=NODES, namespace=None, operator_pause_waiter=None
        )
    ]


def test_the_wrapper_passes_every_item_on_and_forgets_at_the_end_of_a_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    relisting, indexers = _operator()
    for name in ("a", "b"):
        _index(indexers, _body(name))
    first = [{"type": None, "object": _body("a")}, {"type": None, "object": _body("b")}, watching.Bookmark.LISTED]
    monkeypatch.setattr(kopf_relisting, "_kopf_continuous_watch", _kopf_stream(first))
    assert asyncio.run(_drain(relisting)) == first
    # the watch goes down; b is deleted meanwhile; the next listing shows only a
    second = [{"type": None, "object": _body("a")}, watching.Bookmark.LISTED, {"type": "ADDED", "object": _body("e")}]
    monkeypatch.setattr(kopf_relisting, "_kopf_continuous_watch", _kopf_stream(second))
    assert asyncio.run(_drain(relisting)) == second
    assert _held(indexers, "nodes") == {"a"}


def test_a_listing_cut_short_forgets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    relisting, indexers = _operator()
    _index(indexers, _body("a"))
    relisting.listed((NODES, None), [kopf_relisting.object_key(_body("a"))])
    monkeypatch.setattr(kopf_relisting, "_kopf_continuous_watch", _kopf_stream([]))  # a connection error: no LISTED
    asyncio.run(_drain(relisting))
    assert _held(indexers, "nodes") == {"a"}


def test_without_an_operator_relisting_the_wrapper_only_passes_items_on(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"type": None, "object": _body("a")}, watching.Bookmark.LISTED]
    monkeypatch.setattr(kopf_relisting, "_kopf_continuous_watch", _kopf_stream(items))
    assert asyncio.run(_drain(None)) == items
