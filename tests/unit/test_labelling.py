"""Which nodes a cache's reconcile reads live before preloading them again, and how the view's labels are overlaid."""

from __future__ import annotations

from warmstart.api import nodelabels
from warmstart.api.caches import NodeCacheStatus
from warmstart.api.states import NodeCacheState
from warmstart.controllers import labelling
from warmstart.controllers.nodes import NodeFacts

LABEL = nodelabels.weights_ready_label("0123456789ab")


def _node(name: str, labelled: bool = False) -> NodeFacts:
    return NodeFacts(name=name, labels={LABEL: nodelabels.READY} if labelled else {})


def test_only_nodes_ready_in_status_and_unlabelled_in_the_view_are_read_again() -> None:
    recorded = [
        NodeCacheStatus(node="ready-unlabelled", state=NodeCacheState.READY, attempts=1),
        NodeCacheStatus(node="ready-labelled", state=NodeCacheState.READY, attempts=1),
        NodeCacheStatus(node="pending", state=NodeCacheState.PENDING, attempts=1),
        NodeCacheStatus(node="failed", state=NodeCacheState.FAILED, reason="NotFound", attempts=1),
        NodeCacheStatus(node="left", state=NodeCacheState.READY, attempts=1),  # not in the view any more
    ]
    view = [_node("ready-unlabelled"), _node("ready-labelled", True), _node("pending"), _node("failed"), _node("new")]
    assert labelling.ready_unseen(recorded, view, LABEL) == ["ready-unlabelled"]


def test_nothing_is_read_when_the_view_agrees_with_status() -> None:
    recorded = [NodeCacheStatus(node="a", state=NodeCacheState.READY, attempts=1)]
    assert labelling.ready_unseen(recorded, [_node("a", True)], LABEL) == []
    assert labelling.ready_unseen([], [_node("a")], LABEL) == []


def test_overlay_adds_the_label_to_the_named_nodes_only_and_keeps_their_other_labels() -> None:
    view = [NodeFacts(name="a", labels={"zone": "1"}), _node("b")]
    overlaid = labelling.overlay(view, LABEL, {"a": 0.0})
    assert overlaid[0].labels == {"zone": "1", LABEL: nodelabels.READY}
    assert overlaid[1].labels == {}
    assert view[0].labels == {"zone": "1"}  # the view itself is not changed
