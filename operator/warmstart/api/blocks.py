"""Spec blocks shared by InferenceEndpointConfig and JumpStartModel (caching, routing, metrics, ...)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ApiModel
from warmstart.api.sources import NO_DOTDOT
from warmstart.api.strategies import RoutingStrategy, RoutingStrategyField

DEFAULT_HOST_PATH = "/opt/dlami/nvme"


class WeightsCache(ApiModel):
    """Preload the model weights onto each target node's local NVMe."""

    enabled: bool = Field(default=False, description="Preload weights onto every target node before deploying.")
    host_path: str = Field(
        default=DEFAULT_HOST_PATH,
        max_length=512,
        description="Node directory of the cache root (the NVMe mount). Absolute, no '..'.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.startsWith('/')", "message": "hostPath must be an absolute path"},
                {"rule": NO_DOTDOT, "message": "hostPath must not contain a '..' path segment"},
            ]
        },
    )
    model_size_bytes: int | None = Field(
        default=None,
        ge=0,
        description="warmstart extension: expected model size, for the NVMe capacity pre-check before any download.",
    )


class ImageCache(ApiModel):
    """Pre-pull the inference image on each target node."""

    enabled: bool = Field(
        default=False, description="Run a pre-pull DaemonSet on the target nodes. Never blocks the deployment."
    )


class ModelCacheConfig(ApiModel):
    """Node-local caches for the weights and the image."""

    weights_cache: WeightsCache | None = Field(default=None, description="Weights cache on the node's NVMe.")
    image_cache: ImageCache | None = Field(default=None, description="Image pre-pull cache.")


class IntelligentRoutingSpec(ApiModel):
    """The router in front of the model replicas."""

    enabled: bool = Field(default=False, description="Deploy the router in front of the model replicas.")
    routing_strategy: RoutingStrategyField = Field(
        default=RoutingStrategy.PREFIXAWARE,
        description="random, roundrobin, leastoutstanding, session, prefixaware or kvaware (served as prefixaware). "
        "Changeable live.",
    )
    auto_scaling_spec: AutoScalingSpec | None = Field(
        default=None, description="Autoscaling through KEDA, as spec.autoScalingSpec (which wins if both are set)."
    )


class LoadBalancer(ApiModel):
    """Load balancer settings."""

    health_check_path: str | None = Field(default=None, max_length=256, description="Path of the health check.")
    routing_algorithm: str | None = Field(
        default=None, max_length=64, description="least_outstanding_requests or round_robin."
    )


class ModelMetrics(ApiModel):
    """Where the model container exposes metrics."""

    path: str = Field(default="/metrics", max_length=256, description="Metrics path.")
    port: int = Field(default=8080, ge=1, le=65535, description="Metrics port.")


class Metrics(ApiModel):
    """Metrics collection."""

    enabled: bool = Field(default=False, description="Enable metrics collection.")
    metrics_scrape_interval_seconds: int = Field(default=15, ge=1, description="Scrape interval in seconds.")
    model_metrics: ModelMetrics | None = Field(default=None, description="Model container metrics.")


class L2CacheSpec(ApiModel):
    """Second-level KV cache."""

    l2_cache_backend: str | None = Field(default=None, description="tieredstorage or redis.")
    l2_cache_local_url: str | None = Field(default=None, description="Redis URL when the backend is redis.")


class KvCacheSpec(ApiModel):
    """Managed KV cache tiers (accepted; not implemented by warmstart)."""

    enable_l1_cache: bool | None = Field(default=None, description="CPU-memory KV cache.")
    enable_l2_cache: bool | None = Field(default=None, description="Shared KV cache.")
    l2_cache_spec: L2CacheSpec | None = Field(default=None, description="L2 cache settings.")


class TlsConfig(ApiModel):
    """TLS certificate output (accepted; not implemented by warmstart)."""

    tls_certificate_output_s3_uri: str | None = Field(default=None, description="S3 URI for the certificate.")


class KubernetesSettings(ApiModel):
    """Pod-level Kubernetes settings."""

    service_account_name: str | None = Field(
        default=None, max_length=253, description="Service account of the model pods and preload Jobs."
    )
    image_pull_secrets: list[str] | None = Field(
        default=None, description="warmstart extension: image pull secret names."
    )
    node_selector: dict[str, str] | None = Field(default=None, description="Extra node selector for the model pods.")
    tolerations: list[dict[str, Any]] | None = Field(default=None, description="Tolerations for the model pods.")
    annotations: dict[str, str] | None = Field(default=None, description="Extra pod annotations.")
    labels: dict[str, str] | None = Field(default=None, description="Extra pod labels.")


class Tag(ApiModel):
    """A name/value tag."""

    name: str = Field(description="Tag name.")
    value: str = Field(description="Tag value.")


class SageMakerEndpoint(ApiModel):
    """SageMaker endpoint registration (accepted; not implemented by warmstart)."""

    name: str | None = Field(default=None, description="SageMaker endpoint name.")
    register_endpoint: bool | None = Field(default=None, alias="register", description="Register a SageMaker endpoint.")
