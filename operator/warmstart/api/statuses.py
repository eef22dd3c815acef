"""Status blocks written by the operator: endpoint state, cache summaries, resolution and warm placement."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.base import ApiModel, Condition, conditions_schema_extra
from warmstart.api.sources import ModelSourceConfig
from warmstart.api.states import CacheState, EndpointState


class CacheSummary(ApiModel):
    """A child cache's progress, mirrored on the endpoint."""

    name: str | None = Field(default=None, description="Name of the ModelDataCacheConfig or ModelImageCache.")
    state: CacheState | None = Field(default=None, description="State of the cache.")
    ready_nodes: int = Field(default=0, description="Nodes whose cache is complete.")
    target_nodes: int = Field(default=0, description="Nodes that should hold the cache.")
    message: str | None = Field(default=None, description="Human-readable progress or error.")

    @property
    def detail(self) -> str | None:
        """The message without its leading "N/M nodes ready" (which ready_nodes/target_nodes already say)."""
        text = self.message
        count = f"{self.ready_nodes}/{self.target_nodes} nodes ready"
        if text and text.startswith(count):
            text = text[len(count) :].lstrip(";:, ")
        return text or None


class ResolvedModel(ApiModel):
    """What the operator resolved the spec to: the source, image and targeting actually used."""

    model_source_config: ModelSourceConfig | None = Field(default=None, description="The resolved weights source.")
    image: str | None = Field(default=None, description="The resolved inference image.")
    instance_types: list[str] | None = Field(default=None, description="Target instance types, in preference order.")
    environment: dict[str, str] | None = Field(default=None, description="Environment added by resolution (JumpStart).")
    weights_cache_key: str | None = Field(default=None, description="Content key of the weights cache.")
    image_cache_key: str | None = Field(default=None, description="Content key of the image cache.")


class WarmPlacement(ApiModel):
    """Where the endpoint's pods run: on cache-ready (warm) or unprepared (cold) nodes."""

    warm_pods: int = Field(default=0, description="Pods on nodes whose weights cache is ready.")
    cold_pods: int = Field(default=0, description="Pods on nodes without a ready weights cache.")


class DeploymentObjectStatus(ApiModel):
    """The model Deployment's own status, as its controller reports it (HyperPod's deploymentStatus.status)."""

    replicas: int | None = Field(default=None, description="Non-terminated pods of the Deployment.")
    ready_replicas: int | None = Field(default=None, description="Pods with a Ready condition.")
    available_replicas: int | None = Field(default=None, description="Pods ready for at least minReadySeconds.")
    updated_replicas: int | None = Field(default=None, description="Pods with the current template.")
    unavailable_replicas: int | None = Field(default=None, description="Pods still needed for full capacity.")
    observed_generation: int | None = Field(default=None, description="Generation the Deployment controller saw.")
    conditions: list[dict[str, Any]] | None = Field(
        default=None, description="The Deployment's conditions (Available, Progressing, ...), as it reports them."
    )


class DeploymentStatus(ApiModel):
    """The native Kubernetes Deployment that hosts the model (HyperPod's deploymentStatus)."""

    name: str = Field(description="Name of the Deployment.")
    deployment_object_overall_state: EndpointState | None = Field(
        default=None, description="Overall state of the endpoint's deployment (the endpoint's state)."
    )
    reason: str | None = Field(default=None, description="Reason of the endpoint's Ready condition.")
    message: str | None = Field(default=None, description="Message of the endpoint's Ready condition.")
    last_updated: str | None = Field(default=None, description="When this block last changed (RFC 3339).")
    status: DeploymentObjectStatus | None = Field(default=None, description="Status of the Deployment.")


class ModelMetricsStatus(ApiModel):
    """Where the model container serves its metrics."""

    port: int | None = Field(default=None, description="Port the metrics are served on.")
    path: str | None = Field(default=None, description="Path the metrics are served on.")


class MetricsStatus(ApiModel):
    """How the model pods' metrics are collected (HyperPod's metricsStatus)."""

    enabled: bool = Field(description="Whether the model pods' metrics are collected.")
    state: str | None = Field(
        default=None, description="PodMonitor (the Prometheus Operator scrapes them) or ScrapeAnnotations."
    )
    metrics_scrape_interval_seconds: int | None = Field(default=None, description="Scrape interval in seconds.")
    model_metrics: ModelMetricsStatus | None = Field(default=None, description="The model container's metrics.")


class EndpointStatus(ApiModel):
    """Observed state of an InferenceEndpointConfig or JumpStartModel."""

    state: EndpointState | None = Field(
        default=None, description="HyperPod-compatible summary, derived from the conditions."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="Ready, WeightsCacheReady, ImageCacheReady, Progressing, Degraded, ...",
        json_schema_extra=conditions_schema_extra,
    )
    observed_generation: int | None = Field(default=None, description="Latest generation reconciled.")
    replicas: int | None = Field(default=None, description="Observed replicas (scale subresource).")
    available_replicas: int | None = Field(default=None, description="Available replicas of the Deployment.")
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    weights_cache_status: CacheSummary | None = Field(default=None, description="The weights cache.")
    image_cache_status: CacheSummary | None = Field(default=None, description="The image cache.")
    resolved: ResolvedModel | None = Field(default=None, description="What the spec resolved to.")
    warm_placement: WarmPlacement | None = Field(default=None, description="Pods on warm versus cold nodes.")
    deployment_name: str | None = Field(default=None, description="The model Deployment.")
    router_name: str | None = Field(default=None, description="The router Deployment and Service, while routing is on.")
    endpoint_picker_name: str | None = Field(
        default=None,
        description="In gateway mode (intelligentRoutingSpec.endpointPicker): the endpoint picker's Deployment and "
        "Service; the InferencePool carries the endpoint's name.",
    )
    gate_opened_at: str | None = Field(default=None, description="When the deployment gate opened (RFC 3339).")
    waiting_since: str | None = Field(
        default=None, description="When the endpoint started waiting for the current cache generation."
    )
    deployment_status: DeploymentStatus | None = Field(
        default=None, description="HyperPod-compatible: the model Deployment, its overall state and its status."
    )
    metrics_status: MetricsStatus | None = Field(
        default=None, description="HyperPod-compatible: how the model pods' metrics are collected."
    )
