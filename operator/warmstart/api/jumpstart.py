"""JumpStartModel: a SageMaker JumpStart model id and version, resolved to weights, image and environment."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ApiModel
from warmstart.api.blocks import (
    IntelligentRoutingSpec,
    KubernetesSettings,
    LoadBalancer,
    Metrics,
    ModelCacheConfig,
    SageMakerEndpoint,
    TlsConfig,
)
from warmstart.api.statuses import EndpointStatus
from warmstart.api.workers import EnvironmentVariable, RequestLimits

KIND = "JumpStartModel"
PLURAL = "jumpstartmodels"


class JumpStartModelRef(ApiModel):
    """Which JumpStart model to deploy."""

    model_id: str = Field(
        min_length=1, max_length=256, description="JumpStart model id, e.g. meta-textgeneration-llama-3-1-8b-instruct."
    )
    model_version: str | None = Field(
        default=None, max_length=64, description="Exact version, '1.*' for the newest 1.x, or '*'/unset for the newest."
    )
    accept_eula: bool = Field(default=False, description="Accept the model's EULA. Required for gated models.")
    model_hub_name: str | None = Field(
        default=None, max_length=256, description="Private hub name (accepted; the public hub is used)."
    )
    additional_configs: list[dict[str, Any]] | None = Field(default=None, description="Additional configs (accepted).")


class JumpStartServer(ApiModel):
    """Where and how the server runs."""

    instance_type: str = Field(min_length=1, max_length=64, description="Instance type, e.g. ml.g5.12xlarge.")
    image: str | None = Field(
        default=None, max_length=1024, description="warmstart extension: override the resolved image."
    )
    execution_role: str | None = Field(default=None, description="Execution role (accepted).")


class JumpStartModelSpec(ApiModel):
    """Desired state of a JumpStart endpoint."""

    model: JumpStartModelRef = Field(description="The JumpStart model.")
    server: JumpStartServer = Field(description="The server.")
    replicas: int = Field(default=1, ge=0, le=2**31 - 1, description="Desired replicas (scale subresource).")
    max_deploy_time_in_seconds: int = Field(
        default=3600, ge=0, description="How long to wait for the weights cache before deploying anyway."
    )
    environment_variables: list[EnvironmentVariable] | None = Field(
        default=None, description="Environment added to the resolved defaults."
    )
    request_limits: RequestLimits | None = Field(
        default=None, description="Per-replica request limits (router concurrency cap)."
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
    tls_config: TlsConfig | None = Field(default=None, description="TLS settings (not implemented).")
    kubernetes: KubernetesSettings | None = Field(default=None, description="Pod-level Kubernetes settings.")
    sage_maker_endpoint: SageMakerEndpoint | None = Field(
        default=None, description="SageMaker endpoint registration (not implemented)."
    )


class JumpStartModel(ApiModel):
    """A JumpStart endpoint as the user declared it."""

    spec: JumpStartModelSpec = Field(description="Desired state.")
    status: EndpointStatus | None = Field(default=None, description="Observed state.")
