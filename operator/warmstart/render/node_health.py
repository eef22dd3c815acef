"""Which target nodes are unavailable for a weights cache: cordoned, NotReady, unreachable or tainted NoExecute.

Policy (docs/weights-cache.md): an unavailable node leaves the target set at once. It gets no preload Job (a running
one is deleted, and a new one is created when the node is back), it does not count in `targetNodes`, so it never holds
the deployment gate, and the cache's status lists it under `unavailableNodes` with the reason. Its ready label and
files stay: a node that comes back Ready with the label is Ready again without a download.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from warmstart.render import tolerations

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


class Unavailability(StrEnum):
    """Why a target node is left out, in the order they are checked."""

    UNREACHABLE = "Unreachable"
    NOT_READY = "NotReady"
    CORDONED = "Cordoned"
    NO_EXECUTE_TAINT = "NoExecuteTaint"


class NodeHealthLike(Protocol):
    """What the check needs of a node (controllers.nodes.NodeFacts fits)."""

    @property
    def name(self) -> str: ...
    @property
    def ready(self) -> str | None: ...
    @property
    def unschedulable(self) -> bool: ...
    @property
    def taints(self) -> Sequence[Mapping[str, str]]: ...


def unavailability(node: NodeHealthLike, tolerated: Sequence[Mapping[str, Any]]) -> Unavailability | None:
    """Why the node cannot hold a cache now (None when it can).

    `ready` is the status of the node's Ready condition ("True", "False", "Unknown", None when not reported yet);
    `tolerated` are the cache pods' tolerations: a NoExecute taint they tolerate does not count.
    """
    keys = {t.get("key") for t in node.taints}
    if node.ready == "Unknown" or UNREACHABLE_TAINT in keys:
        return Unavailability.UNREACHABLE
    if node.ready != "True" or NOT_READY_TAINT in keys:
        return Unavailability.NOT_READY
    if node.unschedulable:
        return Unavailability.CORDONED
    no_execute = [t for t in node.taints if t.get("effect") == "NoExecute"]
    if not tolerations.schedulable_strict(no_execute, tolerated):
        return Unavailability.NO_EXECUTE_TAINT
    return None


def unavailable(nodes: Iterable[NodeHealthLike], tolerated: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """node name -> reason, for every node in `nodes` that is unavailable."""
    found: dict[str, str] = {}
    for node in nodes:
        reason = unavailability(node, tolerated)
        if reason is not None:
            found[node.name] = str(reason)
    return found
