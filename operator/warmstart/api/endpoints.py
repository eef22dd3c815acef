"""InferenceEndpointConfig: a model served from S3, FSx, the Hub or a volume, on chosen instance types."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ApiModel, api_config
from warmstart.api.blocks import (
    DnsConfig,
    IntelligentRoutingSpec,
    KubernetesSettings,
    KvCacheSpec,
    LoadBalancer,
    Metrics,
    ModelCacheConfig,
    SageMakerEndpoint,
    Tag,
    TlsConfig,
)
from warmstart.api.scheduling import NodeAffinity
from warmstart.api.sources import VOLUME_SOURCE_NEEDS_A_VOLUME, VOLUME_SOURCE_NOT_CACHED, ModelSourceConfig
from warmstart.api.statuses import EndpointStatus
from warmstart.api.workers import EnvironmentVariable, Worker

KIND = "InferenceEndpointConfig"
PLURAL = "inferenceendpointconfigs"

TARGETING_EXCLUSIVE = {
    "rule": "[has(self.instanceType), has(self.instanceTypes), has(self.nodeAffinity)].filter(x, x).size() <= 1",
    "message": "instanceType, instanceTypes and nodeAffinity are mutually exclusive: set only one of them",
}


class InferenceEndpointConfigSpec(ApiModel):
    """Desired state of an inference endpoint."""

    model_name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
        description="Name of the model, as HyperPod accepts it: at most 63 characters, a letter or digit first "
        "(e.g. Llama-3.1-8B-Instruct). Child object names derive from the object's name, never from this.",
    )
    model_version: str | None = Field(default=None, max_length=128, description="Version of the model.")
    endpoint_name: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^$|^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
        description="SageMaker endpoint name (accepted; not created by warmstart).",
    )
    model_source_config: ModelSourceConfig = Field(description="Where the weights come from.")
    worker: Worker = Field(description="The inference server container.")
    instance_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^ml\..*",
        description="Instance type to deploy on, e.g. ml.g5.24xlarge (the ml. prefix is required, as by HyperPod).",
    )
    instance_types: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="Instance types in order of preference (first is most preferred).",
    )
    node_affinity: NodeAffinity | None = Field(
        default=None, description="Explicit node affinity instead of instance types."
    )
    replicas: int = Field(
        default=1, ge=0, le=2**31 - 1, description="Desired model server replicas (scale subresource)."
    )
    invocation_endpoint: str = Field(
        default="invocations", max_length=256, description="Invocation path of the model server."
    )
    max_deploy_time_in_seconds: int = Field(
        default=3600,
        ge=0,
        description="How long to wait for the weights cache before deploying anyway (Degraded, slower start).",
    )
    model_cache_config: ModelCacheConfig | None = Field(
        default=None, description="Node-local weights and image caches."
    )
    intelligent_routing_spec: IntelligentRoutingSpec | None = Field(default=None, description="Prefix-aware router.")
    load_balancer: LoadBalancer | None = Field(default=None, description="Load balancer settings.")
    metrics: Metrics | None = Field(default=None, description="Metrics collection.")
    auto_scaling_spec: AutoScalingSpec | None = Field(
        default=None, description="Autoscaling through KEDA: rendered into a ScaledObject on the scale subresource."
    )
    kv_cache_spec: KvCacheSpec | None = Field(default=None, description="Managed KV cache tiers (not implemented).")
    tls_config: TlsConfig | None = Field(default=None, description="TLS settings (not implemented).")
    kubernetes: KubernetesSettings | None = Field(default=None, description="Pod-level Kubernetes settings.")
    dns_config: DnsConfig | None = Field(
        default=None, description="Route53 automation for tlsConfig's custom domain (not implemented)."
    )
    tags: list[Tag] | None = Field(default=None, description="Tags.")
    environment_variables: list[EnvironmentVariable] | None = Field(
        default=None, description="Extra environment for the worker."
    )
    sage_maker_endpoint: SageMakerEndpoint | None = Field(
        default=None, description="SageMaker endpoint registration (not implemented)."
    )
    data_capture: dict[str, Any] | None = Field(default=None, description="Data capture (not implemented).")
    pd_spec: dict[str, Any] | None = Field(default=None, description="Prefill/decode disaggregation (not implemented).")
    initial_replica_count: int | None = Field(
        default=None, alias="InitialReplicaCount", ge=0, description="Legacy initial replica count."
    )

    model_config = api_config(TARGETING_EXCLUSIVE, VOLUME_SOURCE_NEEDS_A_VOLUME, VOLUME_SOURCE_NOT_CACHED)


class InferenceEndpointConfig(ApiModel):
    """An inference endpoint as the user declared it."""

    spec: InferenceEndpointConfigSpec = Field(description="Desired state.")
    status: EndpointStatus | None = Field(default=None, description="Observed state.")
