"""An in-memory index of nodes (labels, annotations, readiness), kept by kopf from one watch."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from warmstart.controllers.settings import OperatorSettings


@dataclass(frozen=True)
class NodeFacts:
    """What the controllers need to know about a node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    deleting: bool = False
    #: spec.taints as the API shows them (key, value, effect)
    taints: tuple[Mapping[str, str], ...] = ()
    #: status of the Ready condition: "True", "False", "Unknown" (unreachable), None when not reported yet
    ready: str | None = "True"


def node_facts(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], body: Any, **_: Any
) -> dict[str, NodeFacts]:
    """Index nodes by name."""
    return {
        name: NodeFacts(
            name=name,
            labels=dict(labels),
            annotations=dict(annotations),
            unschedulable=bool(body.get("spec", {}).get("unschedulable")),
            deleting=body.get("metadata", {}).get("deletionTimestamp") is not None,
            taints=tuple(dict(t) for t in body.get("spec", {}).get("taints") or []),
            ready=_ready(body),
        )
    }


def _ready(body: Any) -> str | None:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status"))
    return None


def all_nodes(index: Mapping[str, Any]) -> Iterator[NodeFacts]:
    """Every live node in a `node_facts` index."""
    for store in index.values():
        for facts in store:
            if isinstance(facts, NodeFacts) and not facts.deleting:
                yield facts


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the node index."""
    del settings
    kopf.index("", "v1", "nodes", registry=registry)(node_facts)
