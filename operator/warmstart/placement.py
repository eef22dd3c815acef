"""Where caches and pods go: node matching for targeting, the ml.* NVMe and accelerator tables, the capacity check.

The NVMe table lists the local instance-store capacity of each instance type in decimal bytes, as AWS publishes it
for the EC2 instance family behind each ml.* type (EC2 "instance store volumes" tables; SageMaker HyperPod mounts
that storage at /opt/dlami/nvme). A node annotation `warmstart.io/nvme-capacity-bytes` overrides the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from warmstart.api.nodelabels import INSTANCE_TYPE, NVME_CAPACITY_ANNOTATION
from warmstart.api.scheduling import NodeAffinity, NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm

GB = 1_000_000_000

#: instance type -> local NVMe instance store, decimal GB
NVME_GB: dict[str, int] = {
    "ml.g4dn.xlarge": 125, "ml.g4dn.2xlarge": 225, "ml.g4dn.4xlarge": 225, "ml.g4dn.8xlarge": 900,
    "ml.g4dn.12xlarge": 900, "ml.g4dn.16xlarge": 900,
    "ml.g5.xlarge": 250, "ml.g5.2xlarge": 450, "ml.g5.4xlarge": 600, "ml.g5.8xlarge": 900,
    "ml.g5.12xlarge": 3800, "ml.g5.16xlarge": 1900, "ml.g5.24xlarge": 3800, "ml.g5.48xlarge": 7600,
    "ml.g6.xlarge": 250, "ml.g6.2xlarge": 450, "ml.g6.4xlarge": 600, "ml.g6.8xlarge": 900,
    "ml.g6.12xlarge": 3760, "ml.g6.16xlarge": 1880, "ml.g6.24xlarge": 3760, "ml.g6.48xlarge": 7520,
    "ml.g6e.xlarge": 250, "ml.g6e.2xlarge": 450, "ml.g6e.4xlarge": 600, "ml.g6e.8xlarge": 900,
    "ml.g6e.12xlarge": 3800, "ml.g6e.16xlarge": 1900, "ml.g6e.24xlarge": 3800, "ml.g6e.48xlarge": 7600,
    "ml.p4d.24xlarge": 8000, "ml.p4de.24xlarge": 8000,
    "ml.p5.48xlarge": 30400, "ml.p5e.48xlarge": 30400, "ml.p5en.48xlarge": 30400,
    "ml.p6-b200.48xlarge": 30720,
    "ml.trn1.2xlarge": 474, "ml.trn1.32xlarge": 7600, "ml.trn1n.32xlarge": 7600, "ml.trn2.48xlarge": 7600,
}  # fmt: skip

NVIDIA_GPU = "nvidia.com/gpu"
NEURON_DEVICE = "aws.amazon.com/neuron"

#: instance type -> accelerators of the instance, as AWS publishes them for the EC2 type behind each ml.* type
ACCELERATORS: dict[str, tuple[str, int]] = {
    **{f"ml.g4dn.{size}": (NVIDIA_GPU, 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "ml.g4dn.12xlarge": (NVIDIA_GPU, 4),
    **{
        f"ml.{family}.{size}": (NVIDIA_GPU, count)
        for family in ("g5", "g6", "g6e")
        for size, count in (("xlarge", 1), ("2xlarge", 1), ("4xlarge", 1), ("8xlarge", 1), ("16xlarge", 1),
                            ("12xlarge", 4), ("24xlarge", 4), ("48xlarge", 8))
    },
    "ml.p4d.24xlarge": (NVIDIA_GPU, 8), "ml.p4de.24xlarge": (NVIDIA_GPU, 8),
    "ml.p5.48xlarge": (NVIDIA_GPU, 8), "ml.p5e.48xlarge": (NVIDIA_GPU, 8), "ml.p5en.48xlarge": (NVIDIA_GPU, 8),
    "ml.p6-b200.48xlarge": (NVIDIA_GPU, 8),
    "ml.trn1.2xlarge": (NEURON_DEVICE, 1), "ml.trn1.32xlarge": (NEURON_DEVICE, 16),
    "ml.trn1n.32xlarge": (NEURON_DEVICE, 16), "ml.trn2.48xlarge": (NEURON_DEVICE, 16),
    "ml.inf2.xlarge": (NEURON_DEVICE, 1), "ml.inf2.8xlarge": (NEURON_DEVICE, 1),
    "ml.inf2.24xlarge": (NEURON_DEVICE, 6), "ml.inf2.48xlarge": (NEURON_DEVICE, 12),
}  # fmt: skip


def accelerator_request(instance_type: str, wanted: int | None = None, partition: str | None = None) -> dict[str, int]:
    """The accelerator resources one model pod requests on `instance_type`.

    A MIG partition (`mig-1g.10gb`) is one `nvidia.com/mig-1g.10gb`. Otherwise `wanted` devices of the instance's
    kind (what the model says it needs), else all the instance has; {} for an instance type not in the table
    that names no count.
    """
    if partition:
        return {f"nvidia.com/{partition}": 1}
    resource, count = ACCELERATORS.get(instance_type, (NVIDIA_GPU, 0))
    count = wanted if wanted else count
    return {resource: count} if count else {}


#: free space kept on the cache filesystem beyond the model itself
SAFETY_MARGIN_FRACTION = 0.05
SAFETY_MARGIN_MIN_BYTES = 1 * GB


def nvme_capacity_bytes(instance_type: str | None, annotations: Mapping[str, str] | None = None) -> int | None:
    """The node's local NVMe capacity: its annotation, else the table, else unknown."""
    raw = (annotations or {}).get(NVME_CAPACITY_ANNOTATION)
    if raw and raw.isdigit():
        return int(raw)
    if instance_type and instance_type in NVME_GB:
        return NVME_GB[instance_type] * GB
    return None


def margin_bytes(model_bytes: int) -> int:
    """Free space kept beyond a model: 5%, at least 1 GB."""
    return max(int(model_bytes * SAFETY_MARGIN_FRACTION), SAFETY_MARGIN_MIN_BYTES)


def required_bytes(model_bytes: int) -> int:
    """Model size plus the safety margin."""
    return model_bytes + margin_bytes(model_bytes)


def required_bytes_many(models: Sequence[int]) -> int:
    """Several models on one node, whichever is preloaded last: their sizes plus the largest margin.

    The operator checks each new cache as required_bytes(new) + the others' sizes, so all orders fit exactly when
    this does.
    """
    return sum(models) + max((margin_bytes(m) for m in models), default=0)


@dataclass(frozen=True)
class CapacityCheck:
    """Whether a model fits a node's NVMe."""

    fits: bool
    needed_bytes: int
    capacity_bytes: int | None

    @property
    def message(self) -> str:
        if self.capacity_bytes is None:
            return "NVMe capacity unknown; the preload checks free space before writing"
        verb = "fits" if self.fits else "does not fit"
        return (
            f"model needs {self.needed_bytes / GB:.1f} GB with margin; "
            f"node NVMe is {self.capacity_bytes / GB:.1f} GB: {verb}"
        )


def check_capacity(model_bytes: int | Sequence[int], capacity_bytes: int | None) -> CapacityCheck:
    """Compare a model (or several on one node) with a node's capacity; unknown capacity is given the benefit."""
    needed = required_bytes(model_bytes) if isinstance(model_bytes, int) else required_bytes_many(model_bytes)
    fits = capacity_bytes is None or needed <= capacity_bytes
    return CapacityCheck(fits=fits, needed_bytes=needed, capacity_bytes=capacity_bytes)


def _requirement_holds(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    value = labels.get(req.key)
    values = req.values or []
    match req.operator:
        case NodeSelectorOperator.IN:
            return present and value in values
        case NodeSelectorOperator.NOT_IN:
            return not present or value not in values
        case NodeSelectorOperator.EXISTS:
            return present
        case NodeSelectorOperator.DOES_NOT_EXIST:
            return not present
        case NodeSelectorOperator.GT | NodeSelectorOperator.LT:
            try:
                number, bound = int(value or ""), int(values[0])
            except (ValueError, IndexError):
                return False
            return number > bound if req.operator == NodeSelectorOperator.GT else number < bound
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], name: str) -> bool:
    """All requirements of a term hold (fields: only metadata.name, as the scheduler supports)."""
    fields = {"metadata.name": name}
    return all(_requirement_holds(r, labels) for r in term.match_expressions or []) and all(
        _requirement_holds(r, fields) for r in term.match_fields or []
    )


def node_matches(
    labels: Mapping[str, str],
    name: str,
    node_selector: Mapping[str, str] | None = None,
    node_affinity: NodeAffinity | None = None,
) -> bool:
    """Whether a node is targeted: every selector label matches and, if set, one required affinity term holds."""
    if any(labels.get(k) != v for k, v in (node_selector or {}).items()):
        return False
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    if required is None:
        return True
    return any(term_matches(term, labels, name) for term in required.node_selector_terms)


def instance_type_affinity(instance_types: list[str]) -> NodeAffinity:
    """Required affinity to a set of instance types."""
    term = NodeSelectorTerm(
        match_expressions=[
            NodeSelectorRequirement(key=INSTANCE_TYPE, operator=NodeSelectorOperator.IN, values=instance_types)
        ]
    )
    return NodeAffinity.model_validate(
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term.to_api()]}}
    )
