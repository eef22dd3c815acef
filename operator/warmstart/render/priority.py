"""Render the PriorityClass of image pre-pull pods: below every workload, and never preempting one.

Pre-pull pods are a convenience. A negative value makes the scheduler preempt them first and the kubelet evict them
first under node pressure. `preemptionPolicy: Never` means a pre-pull pod waits for room rather than evicting a
workload. They request 1m CPU and 8Mi of memory, so they almost always fit anyway.
"""

from __future__ import annotations

from typing import Any

from warmstart.render import labels

Manifest = dict[str, Any]

DEFAULT_NAME = "warmstart-prepull"
#: below the default priority 0 of ordinary pods
VALUE = -100


def priority_class(name: str = DEFAULT_NAME) -> Manifest:
    """The PriorityClass manifest (cluster-scoped), as the chart installs it and the operator ensures it."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": labels.managed({labels.COMPONENT: "image-prepull"})},
        "value": VALUE,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "warmstart image pre-pull pods: lowest priority, never preempt workloads.",
    }
