"""Node labels that say a cache is ready on a node: set them, remove them, and trust the ones set a moment ago."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from warmstart.api import nodelabels
from warmstart.controllers.nodes import NodeFacts
from warmstart.controllers.storage import NotFound, Store

#: a label this operator set is trusted for this long even if the node index has not caught up yet
LABEL_GRACE_SECONDS = 60.0


def set_label(store: Store, node: str, label: str, value: str | None) -> bool:
    """Set (or, with None, remove) one label on one node. False when the node is gone."""
    try:
        store.merge_patch("v1", "Node", node, {"metadata": {"labels": {label: value}}})
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
