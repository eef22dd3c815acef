"""The node informer's bookkeeping, without an API server: which events change the indexes, and that an expired
watch lists again (tests/integration/test_node_informer.py runs it against the real control plane)."""

from __future__ import annotations

from typing import Any

import pytest

from warmstart.api import nodelabels
from warmstart.controllers import node_watching, nodes

TYPE = "ml.g5.24xlarge"
LABEL = nodelabels.weights_ready_label("abc")


def _node(name: str, *, labels: dict[str, str] | None = None, ready: str = "True", beat: str = "t0") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": beat,
            "labels": {nodelabels.INSTANCE_TYPE: TYPE, **(labels or {})},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": beat}]},
    }


def _informer(*bodies: dict[str, Any]) -> node_watching.NodeInformer:
    informer = node_watching.NodeInformer(api=None)  # type: ignore[arg-type]  # no request is made
    informer._snapshot = node_watching.NodeSnapshot.of([nodes.facts_of(b) for b in bodies])
    return informer


def test_a_heartbeat_changes_nothing_and_a_label_or_readiness_does() -> None:
    informer = _informer(_node("a"), _node("b"))
    before = informer.snapshot
    assert informer.apply({"type": "MODIFIED", "object": _node("a", beat="7")}, "5") == "7"
    assert informer.snapshot is before  # heartbeat only: the same snapshot, nothing copied

    informer.apply({"type": "MODIFIED", "object": _node("a", labels={LABEL: nodelabels.READY}, beat="8")}, "7")
    indexes = informer.indexes()
    assert nodes.ready_labelled(indexes[nodes.NODES_BY_READY_LABEL], LABEL) == ["a"]
    assert before.by_ready_label == {}  # readers of the old snapshot never see it change

    informer.apply({"type": "MODIFIED", "object": _node("b", ready="False", beat="9")}, "8")
    assert nodes.lookup(indexes[nodes.NODE_FACTS], "b").ready == "False"  # type: ignore[union-attr]


def test_a_deleted_node_leaves_every_index() -> None:
    informer = _informer(_node("a", labels={LABEL: nodelabels.READY}), _node("b"))
    informer.apply({"type": "DELETED", "object": _node("a", beat="9")}, "8")
    indexes = informer.indexes()
    assert "a" not in indexes[nodes.NODE_FACTS]
    assert list(indexes[nodes.NODES_BY_INSTANCE_TYPE][TYPE]) == ["b"]
    assert LABEL not in indexes[nodes.NODES_BY_READY_LABEL]


def test_a_bookmark_moves_the_resource_version_and_a_410_is_an_expiry() -> None:
    informer = _informer()
    assert informer.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}, "1") == "42"
    with pytest.raises(node_watching.Expired):
        informer.apply({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}, "42")


class _Scripted(node_watching.NodeInformer):
    """An informer whose requests are a script: list at "1", the watch from "1" expires, list at "2", stop."""

    def __init__(self) -> None:
        super().__init__(api=None)  # type: ignore[arg-type]
        self.calls: list[str] = []

    def list_all(self) -> str:
        self.calls.append("list")
        return str(self.calls.count("list"))

    def watch(self, since: str) -> str:
        self.calls.append(f"watch {since}")
        if since == "1":
            raise node_watching.Expired("too old")
        self._stop.set()
        return since


def test_an_expired_watch_lists_again_before_it_watches() -> None:
    informer = _Scripted()
    informer.run()
    assert informer.calls == ["list", "watch 1", "list", "watch 2"]
    assert informer.wait_synced(0)
