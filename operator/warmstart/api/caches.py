"""The two child caches: ModelDataCacheConfig (weights on NVMe) and ModelImageCache (pre-pulled image)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.base import ApiModel, Condition, ParentReference, SecretKeyRef, api_config, conditions_schema_extra
from warmstart.api.blocks import DEFAULT_HOST_PATH, WeightsCache
from warmstart.api.scheduling import NodeAffinity
from warmstart.api.sources import CACHE_VOLUME_SOURCE_NEEDS_A_CLAIM, ModelSourceConfig
from warmstart.api.states import CacheState, NodeCacheState

MDCC_KIND = "ModelDataCacheConfig"
MDCC_PLURAL = "modeldatacacheconfigs"
MIC_KIND = "ModelImageCache"
MIC_PLURAL = "modelimagecaches"


def _parents_extra(schema: dict[str, Any]) -> None:
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = ["uid"]


class NodeTargeting(ApiModel):
    """Which nodes hold the cache: all nodes matching the selector and the affinity."""

    node_selector: dict[str, str] | None = Field(default=None, description="Node labels that must all match.")
    node_affinity: NodeAffinity | None = Field(
        default=None, description="Required node affinity (preferences are ignored for targeting)."
    )
    tolerate_all_taints: bool = Field(
        default=True,
        description=(
            "Tolerate the GPU node-pool taints (nvidia.com/gpu, aws.amazon.com/neuron) and the operator's extra"
            " tolerations, so tainted GPU nodes are cached too. Never every taint; control-plane nodes are never"
            " targeted."
        ),
    )


class ModelDataCacheConfigSpec(NodeTargeting):
    """A model's weights, kept on the local NVMe of every target node."""

    model_source_config: ModelSourceConfig = Field(
        description="Where the weights come from (JumpStart is resolved to S3)."
    )
    host_path: str = Field(
        default=DEFAULT_HOST_PATH,
        max_length=512,
        description="Cache root on the node; files go to <hostPath>/warmstart/keys/<key>/model/.",
        json_schema_extra=WeightsCache.model_fields["host_path"].json_schema_extra,
    )
    model_size_bytes: int | None = Field(
        default=None, ge=0, description="Expected size, for the capacity pre-check before any Job."
    )
    preload_concurrency: int | None = Field(
        default=None,
        ge=1,
        description=(
            "At most this many nodes preload this cache at the same time; overrides the operator's default"
            " (max(16, 25% of the target nodes), Helm cache.preloadConcurrency)."
        ),
    )
    service_account_name: str | None = Field(
        default=None, max_length=253, description="Service account of the preload Jobs (IRSA)."
    )
    pod_annotations: dict[str, str] | None = Field(default=None, description="Annotations for the preload Job pods.")
    parent_references: list[ParentReference] | None = Field(
        default=None,
        description="Endpoints that use this cache; it is deleted when none is left.",
        json_schema_extra=_parents_extra,
    )

    model_config = api_config(CACHE_VOLUME_SOURCE_NEEDS_A_CLAIM)


class NodeCacheStatus(ApiModel):
    """One node's copy of the cache."""

    node: str = Field(description="Node name.")
    state: NodeCacheState = Field(description="Pending, Downloading, Ready or Failed.")
    reason: str | None = Field(
        default=None, description="Why, in one CamelCase word (InsufficientCapacity, NotFound, ...)."
    )
    message: str | None = Field(default=None, description="Details.")
    bytes: int | None = Field(default=None, description="Bytes preloaded on this node.")
    seconds: float | None = Field(default=None, description="Seconds the preload took.")
    attempts: int | None = Field(default=None, description="Preload Job attempts so far.")
    content_sha256: str | None = Field(
        default=None,
        description="The sha256 of the cache manifest this cache's own preload published or proved on the node.",
    )
    nvme_used_bytes: int | None = Field(
        default=None, description="NVMe bytes the caches the operator knows on this node use (this one included)."
    )
    nvme_free_bytes: int | None = Field(
        default=None, description="NVMe capacity minus nvmeUsedBytes (when the node's capacity is known)."
    )


class UnavailableNode(ApiModel):
    """A node the cache targets that is left out for now (it does not hold the gate)."""

    node: str = Field(description="Node name.")
    reason: str = Field(description="Unreachable, NotReady, Cordoned or NoExecuteTaint.")


class CacheStatus(ApiModel):
    """Observed state common to both caches."""

    state: CacheState | None = Field(
        default=None, description="Pending, Downloading, Ready, PartiallyReady, Failed or Deleting."
    )
    ready_nodes: int = Field(default=0, description="Nodes whose cache is complete.")
    target_nodes: int = Field(default=0, description="Nodes that should hold the cache.")
    message: str | None = Field(default=None, description="Human-readable summary.")
    conditions: list[Condition] | None = Field(
        default=None, description="Ready and friends.", json_schema_extra=conditions_schema_extra
    )
    observed_generation: int | None = Field(default=None, description="Latest generation reconciled.")


class ModelDataCacheConfigStatus(CacheStatus):
    """Observed state of a weights cache."""

    key: str | None = Field(default=None, description="Content key of the cache.")
    bytes_done: int | None = Field(default=None, description="Bytes preloaded, summed over nodes.")
    bytes_total: int | None = Field(
        default=None, description="Bytes expected, summed over target nodes (when the size is known)."
    )
    model_size_bytes: int | None = Field(default=None, description="Size of the model as last measured by a preload.")
    nodes: list[NodeCacheStatus] | None = Field(default=None, description="Per-node state.")
    unavailable_nodes: list[UnavailableNode] | None = Field(
        default=None, description="Matching nodes left out of the targets: cordoned, NotReady, unreachable, NoExecute."
    )
    queued_nodes: int | None = Field(
        default=None, description="Target nodes waiting for a preload slot (preloadConcurrency)."
    )
    preload_concurrency: int | None = Field(
        default=None, description="How many nodes may preload this cache at the same time."
    )
    last_used_time: str | None = Field(
        default=None,
        description="When an endpoint last referenced this cache (hourly granularity): least recently used is evicted"
        " first.",
    )


class ModelDataCacheConfig(ApiModel):
    """A weights cache."""

    spec: ModelDataCacheConfigSpec = Field(description="Desired state.")
    status: ModelDataCacheConfigStatus | None = Field(default=None, description="Observed state.")


class ModelImageCacheSpec(NodeTargeting):
    """An image, pre-pulled on every target node."""

    image: str = Field(min_length=1, max_length=1024, description="Image reference to pre-pull.")
    image_pull_secrets: list[str] | None = Field(default=None, description="Pull secret names in this namespace.")
    pod_annotations: dict[str, str] | None = Field(default=None, description="Annotations for the pre-pull pods.")
    parent_references: list[ParentReference] | None = Field(
        default=None,
        description="Endpoints that use this cache; it is deleted when none is left.",
        json_schema_extra=_parents_extra,
    )


class ImagePullFailure(ApiModel):
    """An image pull error seen on a node."""

    node: str = Field(description="Node name.")
    reason: str = Field(description="ErrImagePull, ImagePullBackOff, ...")
    message: str | None = Field(default=None, description="The kubelet's message.")


class ModelImageCacheStatus(CacheStatus):
    """Observed state of an image cache."""

    key: str | None = Field(default=None, description="Content key of the cache.")
    image: str | None = Field(default=None, description="The image being cached.")
    resolved_digest: str | None = Field(default=None, description="Image digest reported by a node.")
    failures: list[ImagePullFailure] | None = Field(default=None, description="Pull failures by node.")


class ModelImageCache(ApiModel):
    """An image cache."""

    spec: ModelImageCacheSpec = Field(description="Desired state.")
    status: ModelImageCacheStatus | None = Field(default=None, description="Observed state.")


__all__ = [
    "ModelDataCacheConfig",
    "ModelDataCacheConfigSpec",
    "ModelImageCache",
    "ModelImageCacheSpec",
    "NodeCacheStatus",
    "SecretKeyRef",
]
