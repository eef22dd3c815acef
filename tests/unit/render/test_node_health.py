"""Unavailable nodes: which matching nodes leave a weights cache's targets, and that cache pods never tolerate a
node that went away."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from warmstart.render import node_health, tolerations
from warmstart.render.context import RenderContext

GPU = tolerations.cache_tolerations([])


@dataclass(frozen=True)
class Node:
    name: str = "n"
    ready: str | None = "True"
    unschedulable: bool = False
    taints: tuple[Mapping[str, str], ...] = ()


def taint(key: str, effect: str = "NoExecute") -> Mapping[str, str]:
    return {"key": key, "effect": effect}


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (Node(), None),
        (Node(ready="Unknown"), "Unreachable"),
        (Node(taints=(taint("node.kubernetes.io/unreachable"),)), "Unreachable"),
        (Node(ready="False"), "NotReady"),
        (Node(ready=None), "NotReady"),
        (Node(taints=(taint("node.kubernetes.io/not-ready", "NoSchedule"),)), "NotReady"),
        (Node(unschedulable=True), "Cordoned"),
        (Node(taints=(taint("example.com/maintenance"),)), "NoExecuteTaint"),
        (Node(taints=(taint("node.kubernetes.io/out-of-service"),)), "NoExecuteTaint"),
        (Node(taints=(taint("nvidia.com/gpu", "NoSchedule"),)), None),
        (Node(taints=(taint("example.com/maintenance", "NoSchedule"),)), None),
    ],
)
def test_a_node_is_unavailable_when_cordoned_not_ready_unreachable_or_tainted_no_execute(
    node: Node, reason: str | None
) -> None:
    found = node_health.unavailability(node, GPU)
    assert (str(found) if found else None) == reason


def test_a_no_execute_taint_the_cache_pods_tolerate_keeps_the_node() -> None:
    dedicated = {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}
    node = Node(taints=(taint("dedicated"),))
    assert node_health.unavailability(node, tolerations.cache_tolerations([dedicated])) is None
    assert node_health.unavailable([node, Node("ok")], GPU) == {"n": "NoExecuteTaint"}


@pytest.mark.parametrize(
    "blanket",
    [
        {"operator": "Exists"},
        {"operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
    ],
)
def test_cache_pods_never_tolerate_not_ready_or_unreachable(blanket: dict[str, str]) -> None:
    assert blanket not in tolerations.cache_tolerations([blanket])
    with pytest.raises(ValidationError, match="not-ready or unreachable"):
        RenderContext(extra_tolerations=(blanket,))


def test_a_keyed_extra_toleration_is_kept() -> None:
    keyed = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    assert RenderContext(extra_tolerations=(keyed,)).extra_tolerations == (keyed,)
    assert keyed in tolerations.cache_tolerations([keyed])
