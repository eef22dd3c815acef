"""The label and annotation keys on nodes: what warmstart writes there and what it reads from the cluster.

These keys are a contract with the scheduler (node affinity of the model pods), with placement (instance
type, NVMe capacity) and with anyone who inspects a node, so they live in the API.
"""

from __future__ import annotations

from warmstart.api import GROUP

#: Prefix of every cache-readiness label warmstart sets on a node.
CACHE_PREFIX = f"cache.{GROUP}"
#: The value of a cache-readiness label once the cache is complete on that node.
READY = "ready"

#: Well-known label: the node's instance type (read to pick warm nodes and NVMe capacity).
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
#: Annotation a cluster may put on a node to state its NVMe capacity in bytes (overrides the built-in table).
NVME_CAPACITY_ANNOTATION = "warmstart.io/nvme-capacity-bytes"


def weights_ready_label(key: str) -> str:
    """Node label set when the weights cache `key` is complete on that node."""
    return f"{CACHE_PREFIX}/weights-{key}"


def weights_content_annotation(key: str) -> str:
    """Node annotation: the sha256 of the manifest of the weights cache `key` a preload last published or proved on
    that node. A namespace whose own proof names other content proves its access again (cache access csi)."""
    return f"{CACHE_PREFIX}/weights-{key}-content"


def image_ready_label(key: str) -> str:
    """Node label set when the image cache `key` is pulled on that node."""
    return f"{CACHE_PREFIX}/image-{key}"


def weights_evicted_annotation(key: str) -> str:
    """Node annotation set when the weights cache `key` was evicted from that node (value: when)."""
    return f"{CACHE_PREFIX}/evicted-weights-{key}"


#: Prefix of the node annotations that reserve NVMe bytes for a weights cache while it fills the node.
RESERVED_WEIGHTS_PREFIX = f"{CACHE_PREFIX}/reserved-weights-"


def weights_reserved_annotation(key: str) -> str:
    """Node annotation that reserves NVMe bytes (value: bytes) for the weights cache `key` until it is ready there."""
    return f"{RESERVED_WEIGHTS_PREFIX}{key}"
