"""Fake GPU nodes for the local cluster: manifests with real labels and capacity, created and deleted through the API.

kwok manages every node carrying the annotation ``kwok.x-k8s.io/node=fake``: it marks it
Ready, renews its lease and runs the pods bound to it. The scheduler sees the labels, GPU
capacity and taints below exactly as it would on a real HyperPod node.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NVME_ANNOTATION = "warmstart.io/nvme-capacity-bytes"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
DEFAULT_SPEC = "ml.g5.24xlarge=4,ml.p5.48xlarge=2"


@dataclasses.dataclass(frozen=True)
class InstanceType:
    """What the scheduler and the operator can see of one instance type."""

    cpu: str
    memory: str
    gpus: int
    nvme_bytes: int
    """Local instance-store NVMe capacity, as published by AWS."""


#: Shapes of the SageMaker HyperPod instance types the tests use.
INSTANCE_TYPES: Mapping[str, InstanceType] = {
    "ml.g5.xlarge": InstanceType("4", "16Gi", 1, 250_000_000_000),
    "ml.g5.2xlarge": InstanceType("8", "32Gi", 1, 450_000_000_000),
    "ml.g5.12xlarge": InstanceType("48", "192Gi", 4, 3_800_000_000_000),
    "ml.g5.24xlarge": InstanceType("96", "384Gi", 4, 3_800_000_000_000),
    "ml.g5.48xlarge": InstanceType("192", "768Gi", 8, 7_600_000_000_000),
    "ml.p4d.24xlarge": InstanceType("96", "1152Gi", 8, 8_000_000_000_000),
    "ml.p5.48xlarge": InstanceType("192", "2048Gi", 8, 30_400_000_000_000),
    "ml.c5.2xlarge": InstanceType("8", "16Gi", 0, 0),
}
#: For a type not in the table: a mid-size GPU box with a 1 TB instance store.
DEFAULT_INSTANCE = InstanceType("32", "128Gi", 1, 1_000_000_000_000)


@dataclasses.dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


def parse_spec(spec: str) -> list[tuple[str, int]]:
    """``"ml.g5.24xlarge=4,ml.p5.48xlarge=2"`` -> ``[("ml.g5.24xlarge", 4), ("ml.p5.48xlarge", 2)]``."""
    mix: list[tuple[str, int]] = []
    for part in filter(None, (chunk.strip() for chunk in spec.split(","))):
        name, _, count = part.partition("=")
        if not name or not count.isdigit():
            raise ValueError(f"bad node spec {part!r}: expected INSTANCE_TYPE=COUNT, e.g. {DEFAULT_SPEC}")
        mix.append((name.strip(), int(count)))
    return mix


def node_name(instance_type: str, index: int, prefix: str = "kwok") -> str:
    """A DNS-1123 node name such as ``kwok-ml-g5-24xlarge-0``."""
    return f"{prefix}-{re.sub(r'[^a-z0-9-]+', '-', instance_type.lower())}-{index}"


def node_manifest(
    name: str,
    instance_type: str,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
) -> dict[str, Any]:
    """The Node object for a fake node of ``instance_type``; extra ``labels`` win over the defaults."""
    shape = INSTANCE_TYPES.get(instance_type, DEFAULT_INSTANCE)
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": "110", "ephemeral-storage": "500Gi"}
    if shape.gpus:
        resources["nvidia.com/gpu"] = str(shape.gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                INSTANCE_TYPE_LABEL: instance_type,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
            "annotations": {
                KWOK_ANNOTATION: "fake",
                NVME_ANNOTATION: str(shape.nvme_bytes),
            },
        },
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def manifests_for_spec(
    spec: str | Iterable[tuple[str, int]],
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    start: int = 0,
    prefix: str = "kwok",
) -> list[dict[str, Any]]:
    """Node manifests for a whole mix; names are ``<prefix>-<type>-<n>``, numbered per type from ``start``."""
    mix = parse_spec(spec) if isinstance(spec, str) else list(spec)
    return [
        node_manifest(node_name(instance_type, index, prefix), instance_type, labels, taints)
        for instance_type, count in mix
        for index in range(start, start + count)
    ]


def create_nodes(
    api: client.ApiClient,
    spec: str | Iterable[tuple[str, int]] = DEFAULT_SPEC,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    start: int = 0,
    prefix: str = "kwok",
    parallelism: int = 16,
) -> list[str]:
    """Create the nodes of ``spec`` (existing ones are left as they are); return their names.

    Requests go out ``parallelism`` at a time, so hundreds of nodes take seconds.
    """
    manifests = manifests_for_spec(spec, labels, taints, start, prefix)
    core = client.CoreV1Api(api)

    def create(body: dict[str, Any]) -> str:
        try:
            core.create_node(body)
        except ApiException as error:
            if error.status != 409:
                raise
        return str(body["metadata"]["name"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        return list(pool.map(create, manifests))


def delete_node(api: client.ApiClient, name: str) -> None:
    """Delete one node; a node that is already gone is fine."""
    try:
        client.CoreV1Api(api).delete_node(name)
    except ApiException as error:
        if error.status != 404:
            raise


def delete_nodes(api: client.ApiClient, names: Iterable[str], parallelism: int = 16) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        list(pool.map(lambda name: delete_node(api, name), names))


def ready_nodes(api: client.ApiClient, names: Iterable[str] | None = None) -> set[str]:
    """Fake nodes (all, or those in ``names``) that the scheduler can use: Ready, and without the
    ``node.kubernetes.io/*`` condition taints that admission puts on every new node until the
    node-lifecycle controller sees it Ready. Taints of your own do not count."""
    wanted = set(names) if names is not None else None
    ready: set[str] = set()
    for node in client.CoreV1Api(api).list_node().items:
        if (node.metadata.annotations or {}).get(KWOK_ANNOTATION) != "fake":
            continue
        if wanted is not None and node.metadata.name not in wanted:
            continue
        if any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or []):
            continue
        if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            ready.add(node.metadata.name)
    return ready


def wait_ready(api: client.ApiClient, names: Iterable[str], timeout: float = 120.0) -> None:
    """Block until every node in ``names`` is in :func:`ready_nodes`; TimeoutError after ``timeout`` s."""
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        missing = wanted - ready_nodes(api, wanted)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(missing)} of {len(wanted)} nodes not ready after {timeout:.0f} s")
        time.sleep(0.5)
