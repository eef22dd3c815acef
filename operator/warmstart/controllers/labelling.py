"""Node labels that say a cache is ready on a node: set them, remove them, trust the ones set a moment ago, and read
the live node before acting on a label the watch's view does not show."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from warmstart.api import nodelabels
from warmstart.api.caches import NodeCacheStatus
from warmstart.api.states import NodeCacheState
from warmstart.controllers import fanout
from warmstart.controllers.nodes import NodeFacts
from warmstart.controllers.storage import NotFound, Store

#: a label this operator set is trusted for this long even if the node index has not caught up yet
LABEL_GRACE_SECONDS = 60.0


def set_label(store: Store, node: str, label: str, value: str | None) -> bool:
    """Set (or, with None, remove) one label on one node. False when the node is gone."""
    return _set(store, node, "labels", label, value)


def set_annotation(store: Store, node: str, annotation: str, value: str | None) -> bool:
    """Set (or, with None, remove) one annotation on one node. False when the node is gone."""
    return _set(store, node, "annotations", annotation, value)


def _set(store: Store, node: str, field: str, name: str, value: str | None) -> bool:
    try:
        store.merge_patch("v1", "Node", node, {"metadata": {field: {name: value}}})
    except NotFound:
        return False
    return True


def recent(labelled: Mapping[str, float], clock: float) -> dict[str, float]:
    """The nodes labelled within the grace period (node -> monotonic time of the label write)."""
    return {node: at for node, at in labelled.items() if clock - at < LABEL_GRACE_SECONDS}


def overlay(facts: Iterable[NodeFacts], label: str, labelled: Mapping[str, float]) -> list[NodeFacts]:
    """Nodes as the index shows them, plus the ready label on nodes in `labelled` (the watch may lag)."""
    result = []
    for node in facts:
        if node.name in labelled and node.labels.get(label) != nodelabels.READY:
            node = dataclasses.replace(node, labels={**node.labels, label: nodelabels.READY})
        result.append(node)
    return result


def ready_unseen(recorded: Iterable[NodeCacheStatus], facts: Iterable[NodeFacts], label: str) -> list[str]:
    """Nodes that status records Ready but whose ready label the view does not show, by name.

    Either the label was removed since (the node is preloaded again) or the view lags: a standby replica that resumes
    after its peer died acts on indexes from before its pause until kopf's re-list reaches them. Only a read of the
    live node tells which, so these are read before any of them gets a new preload Job."""
    ready = {n.node for n in recorded if n.state == NodeCacheState.READY}
    return [n.name for n in facts if n.name in ready and n.labels.get(label) != nodelabels.READY]


def confirmed(store: Store, facts: Iterable[NodeFacts], label: str, names: Iterable[str]) -> list[NodeFacts]:
    """Nodes as the view shows them, with the ready label of those among `names` that carry it on the API server.

    A node that no longer exists, or whose label is really gone, stays as the view shows it."""
    wanted = sorted(set(names))
    live = dict(zip(wanted, fanout.each(wanted, lambda name: store.get("v1", "Node", name)), strict=True))
    labelled = {
        name
        for name, body in live.items()
        if body is not None and ((body.get("metadata") or {}).get("labels") or {}).get(label) == nodelabels.READY
    }
    return overlay(facts, label, dict.fromkeys(labelled, 0.0))
