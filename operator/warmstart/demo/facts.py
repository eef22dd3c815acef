"""What the demo reports, read from the cluster's objects: per pod its node, how it started and how long it took.

Pure functions over the API's JSON (pods, nodes, the endpoint's status); the flow fetches the objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from typing import Any

from warmstart.api import nodelabels

Manifest = dict[str, Any]
REAL_NODE_LABEL = "warmstart.io/real-node"
_LOADED = re.compile(r"loaded (\d+) files, (\d+) bytes in ([0-9.]+) s")


@dataclasses.dataclass(frozen=True)
class PodFacts:
    """One model pod as the cluster records it."""

    name: str
    node: str
    real: bool
    ready_seconds: float | None
    """Creation to the Ready condition (the API's one-second resolution); None while not Ready."""
    init_reason: str
    """The `--if-missing` init container's result: AlreadyPresent (warm), Downloaded (cold), or '' if not recorded."""
    init_seconds: float | None
    init_bytes: int


def _time(value: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def ready_seconds(pod: Manifest) -> float | None:
    created = _time(pod["metadata"].get("creationTimestamp"))
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            ready = _time(condition.get("lastTransitionTime"))
            return (ready - created).total_seconds() if ready and created else None
    return None


def pod_facts(pod: Manifest, real_nodes: set[str]) -> PodFacts:
    reason, seconds, size = "", None, 0
    for status in pod.get("status", {}).get("initContainerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        try:
            message = json.loads(terminated.get("message") or "{}")
        except ValueError:
            message = {}
        if isinstance(message, dict) and message.get("reason"):
            reason, seconds, size = (
                str(message["reason"]),
                float(message.get("seconds", 0.0)),
                int(message.get("bytes", 0)),
            )
    node = pod.get("spec", {}).get("nodeName", "")
    return PodFacts(pod["metadata"]["name"], node, node in real_nodes, ready_seconds(pod), reason, seconds, size)


def real_node_names(nodes: list[Manifest]) -> set[str]:
    return {n["metadata"]["name"] for n in nodes if n["metadata"].get("labels", {}).get(REAL_NODE_LABEL) == "true"}


def warm_nodes(nodes: list[Manifest], weights_key: str) -> set[str]:
    """Nodes whose weights cache for ``weights_key`` is ready (the label the preload sets)."""
    label = nodelabels.weights_ready_label(weights_key)
    return {n["metadata"]["name"] for n in nodes if n["metadata"].get("labels", {}).get(label) == nodelabels.READY}


def placement(endpoint: Manifest) -> tuple[int, int]:
    """(warm pods, cold pods) as the operator counts them in the endpoint's status."""
    found = (endpoint.get("status") or {}).get("warmPlacement") or {}
    return int(found.get("warmPods", 0)), int(found.get("coldPods", 0))


def weights_read(log: str) -> tuple[int, float] | None:
    """(bytes, seconds) from the simulator's `loaded N files, B bytes in S s` line."""
    match = _LOADED.search(log)
    return (int(match.group(2)), float(match.group(3))) if match else None


def describe(facts: PodFacts) -> str:
    """One line: pod, node kind, how its init container went and how long to Ready."""
    kind = "real node" if facts.real else "kwok node"
    ready = f"Ready {facts.ready_seconds:.0f} s after creation" if facts.ready_seconds is not None else "not Ready"
    if not facts.real:
        return f"{facts.name} on {facts.node} ({kind}, simulated start): {ready}"
    init = (
        f"init container {facts.init_reason} ({facts.init_bytes / 1024**3:.2f} GiB in {facts.init_seconds:.2f} s)"
        if facts.init_reason
        else "init container result not recorded"
    )
    return f"{facts.name} on {facts.node} ({kind}): {init}; {ready}"
