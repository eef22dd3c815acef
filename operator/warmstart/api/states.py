"""The string constants of the API: states and condition types (routing strategies: `strategies.py`)."""

from __future__ import annotations

from enum import StrEnum


class EndpointState(StrEnum):
    """HyperPod-compatible `status.state` of an endpoint, derived from its conditions."""

    DEPLOYMENT_PENDING = "DeploymentPending"
    DEPLOYMENT_IN_PROGRESS = "DeploymentInProgress"
    DEPLOYMENT_COMPLETE = "DeploymentComplete"
    DEPLOYMENT_FAILED = "DeploymentFailed"
    DELETION_PENDING = "DeletionPending"
    DELETION_IN_PROGRESS = "DeletionInProgress"
    DELETION_FAILED = "DeletionFailed"
    DELETION_COMPLETE = "DeletionComplete"


class CacheState(StrEnum):
    """`status.state` of a ModelDataCacheConfig or ModelImageCache."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    READY = "Ready"
    PARTIALLY_READY = "PartiallyReady"
    FAILED = "Failed"
    DELETING = "Deleting"


class NodeCacheState(StrEnum):
    """State of one cache on one node."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    READY = "Ready"
    FAILED = "Failed"


class ConditionType(StrEnum):
    READY = "Ready"
    WEIGHTS_CACHE_READY = "WeightsCacheReady"
    IMAGE_CACHE_READY = "ImageCacheReady"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    RESOLVED = "Resolved"
    UNSUPPORTED_FIELDS = "UnsupportedFields"
    AUTOSCALING = "Autoscaling"
    KV_EVENTS = "KVEvents"
    ROUTING = "Routing"
    INFERENCE_POOL = "InferencePool"
