"""In-memory indexes of nodes (labels, annotations, readiness; names by instance type), kept by kopf from one watch.

A cache that targets instance types (every cache an endpoint makes does) looks up its candidate nodes by instance
type, so one reconcile reads its own nodes, not the fleet's: the operator's work grows with nodes + caches, not with
their product.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from warmstart.api.nodelabels import INSTANCE_TYPE
from warmstart.api.scheduling import NodeAffinity, NodeSelectorOperator
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


def nodes_by_instance_type(name: str, labels: Mapping[str, str], **_: Any) -> dict[str, str]:
    """Index node names by their instance type label."""
    instance_type = labels.get(INSTANCE_TYPE)
    return {instance_type: name} if instance_type else {}


def targeted_instance_types(
    node_selector: Mapping[str, str] | None, node_affinity: NodeAffinity | None
) -> frozenset[str] | None:
    """The instance types outside which no node can match this targeting; None when it does not restrict them (a
    term without an `In` on the instance type, or no required affinity and no selector on it)."""
    if node_selector and INSTANCE_TYPE in node_selector:
        return frozenset({node_selector[INSTANCE_TYPE]})
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    if required is None or not required.node_selector_terms:
        return None
    found: set[str] = set()
    for term in required.node_selector_terms:
        values = next(
            (
                r.values or []
                for r in term.match_expressions or []
                if r.key == INSTANCE_TYPE and r.operator == NodeSelectorOperator.IN
            ),
            None,
        )
        if values is None:
            return None
        found.update(values)
    return frozenset(found)


def candidates(
    node_index: Mapping[str, Any],
    type_index: Mapping[str, Any],
    instance_types: Collection[str] | None,
    also: Iterable[str] = (),
) -> Iterator[NodeFacts]:
    """The live nodes of `instance_types` (every live node when None) and the nodes named in `also`, once each."""
    if instance_types is None:
        yield from all_nodes(node_index)
        return
    names = {n for t in sorted(instance_types) for n in _values(type_index, t)} | set(also)
    for name in sorted(names):
        for facts in _values(node_index, name):
            if isinstance(facts, NodeFacts) and not facts.deleting:
                yield facts


def lookup(node_index: Mapping[str, Any], name: str) -> NodeFacts | None:
    """One node's facts, or None when the index does not hold it."""
    return next((f for f in _values(node_index, name) if isinstance(f, NodeFacts)), None)


def _values(index: Mapping[Any, Any], key: Any) -> list[Any]:
    try:
        return list(index[key])
    except KeyError:
        return []


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the node indexes."""
    del settings
    kopf.index("", "v1", "nodes", registry=registry)(node_facts)
    kopf.index("", "v1", "nodes", registry=registry)(nodes_by_instance_type)
