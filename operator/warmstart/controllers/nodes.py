"""What the controllers know of a node (`NodeFacts`), and how they query the node indexes.

The indexes (nodes by name, names by instance type, names by cache-ready label) are kept by one informer of the
operator's own (controllers/node_watching.py), not by kopf, and reach the handlers among kopf's indexes, under the
names below, in the shape of a kopf index (key -> a collection of values).

A cache that targets instance types (every cache an endpoint makes does) looks up its candidate nodes by instance
type, so one reconcile reads its own nodes, not the fleet's: the operator's work grows with nodes + caches, not with
their product.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from warmstart.api.nodelabels import CACHE_PREFIX, INSTANCE_TYPE, READY
from warmstart.api.scheduling import NodeAffinity, NodeSelectorOperator

#: the handlers' names of the node indexes: name -> (facts,); instance type -> names; cache-ready label -> names
NODE_FACTS = "node_facts"
NODES_BY_INSTANCE_TYPE = "nodes_by_instance_type"
NODES_BY_READY_LABEL = "nodes_by_ready_label"
#: instance type -> (changes its nodes had,), ANY_TYPE: every node's; what a reconcile read of the nodes is unchanged
#: while these are
NODE_CHANGES = "node_changes_by_instance_type"
ANY_TYPE = "*"


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


def facts_of(body: Mapping[str, Any]) -> NodeFacts:
    """A node's facts from its body as the API server returns it (pure)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return NodeFacts(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        deleting=meta.get("deletionTimestamp") is not None,
        taints=tuple(dict(t) for t in spec.get("taints") or []),
        ready=_ready(body),
    )


def node_facts(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], body: Any, **_: Any
) -> dict[str, NodeFacts]:
    """One node's entry in the index by name (kopf's index-handler arguments)."""
    return {name: dataclasses.replace(facts_of(body), name=name, labels=dict(labels), annotations=dict(annotations))}


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


def ready_labels(facts: NodeFacts) -> frozenset[str]:
    """The node's cache labels whose value says the cache is complete there (none while the node is deleted)."""
    if facts.deleting:
        return frozenset()
    return frozenset(k for k, v in facts.labels.items() if v == READY and k.startswith(CACHE_PREFIX + "/"))


def ready_labelled(label_index: Mapping[str, Any], label: str) -> list[str]:
    """The live nodes labelled `label` = ready, from the `nodes_by_ready_label` index, sorted."""
    return sorted(_values(label_index, label))


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


def changes_of(changes_index: Mapping[str, Any], instance_types: Collection[str] | None) -> tuple[int, ...]:
    """The change counts of the nodes of `instance_types` (every node when None), from the NODE_CHANGES index: a
    reconcile that read those nodes has nothing new to see of them while this stays the same."""
    wanted = [ANY_TYPE] if instance_types is None else sorted(instance_types)
    return tuple(next(iter(_values(changes_index, t)), 0) for t in wanted)


def lookup(node_index: Mapping[str, Any], name: str) -> NodeFacts | None:
    """One node's facts, or None when the index does not hold it."""
    return next((f for f in _values(node_index, name) if isinstance(f, NodeFacts)), None)


def _values(index: Mapping[Any, Any], key: Any) -> list[Any]:
    try:
        return list(index[key])
    except KeyError:
        return []
