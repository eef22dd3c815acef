"""The label and annotation keys warmstart puts on nodes and children, in one place."""

from __future__ import annotations

from warmstart.api import GROUP

CACHE_PREFIX = f"cache.{GROUP}"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "warmstart"
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"

#: labels on children
MDCC_LABEL = f"{GROUP}/model-data-cache"
MIC_LABEL = f"{GROUP}/model-image-cache"
NODE_LABEL = f"{GROUP}/node"
ENDPOINT_LABEL = f"{GROUP}/endpoint"
ENDPOINT_KIND_LABEL = f"{GROUP}/endpoint-kind"
ROLE_LABEL = f"{GROUP}/role"

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
HOSTNAME = "kubernetes.io/hostname"
NVME_CAPACITY_ANNOTATION = "warmstart.io/nvme-capacity-bytes"
READY = "ready"


def weights_ready_label(key: str) -> str:
    """Node label set when the weights cache `key` is complete on that node."""
    return f"{CACHE_PREFIX}/weights-{key}"


def image_ready_label(key: str) -> str:
    """Node label set when the image cache `key` is pulled on that node."""
    return f"{CACHE_PREFIX}/image-{key}"


def managed(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels every child carries."""
    return {MANAGED_BY: MANAGER, PART_OF: "warmstart", **(extra or {})}
