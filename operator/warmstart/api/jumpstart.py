"""JumpStartModel: a SageMaker JumpStart model id and version, resolved to weights, image and environment."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ApiModel
from warmstart.api.blocks import (
    DnsConfig,
    IntelligentRoutingSpec,
    KubernetesSettings,
    KvCacheSpec,
    LoadBalancer,
    Metrics,
    ModelCacheConfig,
    SageMakerEndpoint,
    TlsConfig,
)
from warmstart.api.sources import ROLE_ARN
from warmstart.api.statuses import EndpointStatus
from warmstart.api.workers import EnvironmentVariable, RequestLimits

KIND = "JumpStartModel"
PLURAL = "jumpstartmodels"


#: the hub JumpStart publishes to; the only one warmstart reads
PUBLIC_HUB = "SageMakerPublicHub"
HUB_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"


class NameValue(ApiModel):
    """A name/value pair."""

    name: str = Field(description="Name.")
    value: str = Field(description="Value.")


class JumpStartModelRef(ApiModel):
    """Which JumpStart model to deploy."""

    model_id: str = Field(
        min_length=1,
        max_length=63,
        pattern=HUB_NAME,
        description="JumpStart model id, e.g. meta-textgeneration-llama-3-1-8b-instruct.",
    )
    model_version: str | None = Field(
        default=None,
        max_length=14,
        pattern=r"^(\d{1,4}.\d{1,4}.\d{1,4}|\*|\d{1,4}(\.\d{1,4})?\.\*)$",
        description="Exact version (e.g. 2.1.0), or warmstart's extension: '2.*' for the newest 2.x, '*' or unset "
        "for the newest.",
    )
    accept_eula: bool = Field(default=False, description="Accept the model's EULA. Required for gated models.")
    model_hub_name: str | None = Field(
        default=None,
        max_length=63,
        pattern=HUB_NAME,
        description="Hub of the model. SageMakerPublicHub (the default) is the one warmstart reads; a private hub is "
        "named in the UnsupportedFields condition.",
    )
    additional_configs: list[NameValue] | None = Field(
        default=None, max_length=10, description="Additional configs (accepted; not implemented)."
    )
    gated_model_download_role: str | None = Field(
        default=None,
        min_length=20,
        max_length=2048,
        pattern=ROLE_ARN,
        description="IAM role the preload assumes (through STS) to download a gated model's artifacts.",
    )


class AcceleratorValidations(ApiModel):
    """Checks HyperPod runs on the server settings."""

    accelerator_partition_validation: bool = Field(
        default=True, description="Check that the partition type is one the instance type offers."
    )


class JumpStartServer(ApiModel):
    """Where and how the server runs."""

    instance_type: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^ml\..*",
        description="Instance type, e.g. ml.g5.12xlarge (the ml. prefix is required, as by HyperPod).",
    )
    image: str | None = Field(
        default=None, max_length=1024, description="warmstart extension: override the resolved image."
    )
    execution_role: str | None = Field(
        default=None, min_length=20, max_length=2048, pattern=ROLE_ARN, description="Execution role (accepted)."
    )
    accelerator_partition_type: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^mig-.*$",
        description="MIG profile, e.g. mig-1g.10gb: each model pod requests one nvidia.com/mig-<profile> instead of "
        "whole GPUs.",
    )
    validations: AcceleratorValidations | None = Field(default=None, description="Server checks.")


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
    kubernetes: KubernetesSettings | None = Field(
        default=None, description="warmstart extension: pod-level Kubernetes settings."
    )
    sage_maker_endpoint: SageMakerEndpoint | None = Field(
        default=None, description="SageMaker endpoint registration (not implemented)."
    )
    dns_config: DnsConfig | None = Field(
        default=None, description="Route53 automation for tlsConfig's custom domain (not implemented)."
    )
    kv_cache_spec: KvCacheSpec | None = Field(default=None, description="Managed KV cache tiers (not implemented).")
    data_capture: dict[str, Any] | None = Field(default=None, description="Data capture (not implemented).")


class JumpStartModel(ApiModel):
    """A JumpStart endpoint as the user declared it."""

    spec: JumpStartModelSpec = Field(description="Desired state.")
    status: EndpointStatus | None = Field(default=None, description="Observed state.")
