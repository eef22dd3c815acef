"""What the cache pods (preload Jobs, image pre-pull pods) tolerate, and the control-plane nodes they never target.

Never a blanket `operator: Exists`: a pod that tolerates every taint lands on control-plane nodes, on nodes a health
check has cordoned with a taint, and on node pools reserved for others. The cache pods tolerate only the taints a GPU
or Trainium node pool carries (so the nodes the model runs on get cached), plus what the cluster admin adds in the
Helm value `cache.extraTolerations` (docs/weights-cache.md lists them). Never the `not-ready` and `unreachable`
taints: a cache pod must not stay on a node that went away (render/node_health.py takes such nodes out of the targets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Manifest = dict[str, Any]

#: the taints of accelerated node pools: the NVIDIA device plugin's and the Neuron device plugin's conventions
GPU_POOL_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
)

#: labels that mark a control-plane node (the second is the pre-1.24 name some distributions still set)
CONTROL_PLANE_LABELS: tuple[str, ...] = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


#: taints of a node that went away: no cache pod tolerates them (the API server's default 300 s toleration applies)
NODE_GONE_TAINTS: tuple[Mapping[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
)


def tolerates_node_gone(toleration: Mapping[str, Any]) -> bool:
    """Whether a toleration would keep a pod on (or send it to) a NotReady or unreachable node."""
    return any(_tolerates(toleration, taint) for taint in NODE_GONE_TAINTS)


def cache_tolerations(extra: Sequence[Mapping[str, Any]]) -> list[Manifest]:
    """The GPU node-pool tolerations, then the admin's extra ones (duplicates and node-gone tolerations dropped)."""
    result: list[Manifest] = []
    for toleration in (*GPU_POOL_TOLERATIONS, *extra):
        if dict(toleration) not in result and not tolerates_node_gone(toleration):
            result.append(dict(toleration))
    return result


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """The scheduler's rule: empty key with Exists matches every key; empty effect matches every effect."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration.get("key") != taint.get("key"):
        return False
    return toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", "")


def schedulable(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a pod with `tolerations` may go to a node with `taints`, as the DaemonSet controller decides.

    The `node.kubernetes.io/*` taints are passing node conditions (not ready yet, cordoned, under pressure): a Job waits
    them out, so they do not remove a node from the targets.
    """
    blocking = [
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not str(t.get("key", "")).startswith("node.kubernetes.io/")
    ]
    return all(any(_tolerates(tol, taint) for tol in tolerations) for taint in blocking)


def schedulable_strict(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every NoSchedule/NoExecute taint, `node.kubernetes.io/*` included, is tolerated."""
    blocking = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")]
    return all(any(_tolerates(tol, taint) for tol in tolerations) for taint in blocking)


def is_control_plane(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels mark it as a control-plane node."""
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def _not_control_plane() -> list[Manifest]:
    return [{"key": label, "operator": "DoesNotExist"} for label in CONTROL_PLANE_LABELS]


def exclude_control_plane(required: Manifest | None) -> Manifest:
    """A required node selector (API form) that also keeps off control-plane nodes: added to every term (ORed)."""
    terms = list((required or {}).get("nodeSelectorTerms") or [{}])
    guarded = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), *_not_control_plane()]} for term in terms
    ]
    return {"nodeSelectorTerms": guarded}
