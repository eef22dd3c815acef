"""Spec blocks shared by InferenceEndpointConfig and JumpStartModel (caching, routing, metrics, ...)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ApiModel, api_config
from warmstart.api.gateways import EndpointPickerSpec
from warmstart.api.routerknobs import RouterKnobs
from warmstart.api.sources import NO_DOTDOT
from warmstart.api.strategies import RoutingStrategy, RoutingStrategyField

DEFAULT_HOST_PATH = "/opt/dlami/nvme"
#: the model container's default readiness path: the SageMaker container contract's `GET /ping`, as in
#: `loadBalancer.healthCheckPath`'s default
DEFAULT_HEALTH_CHECK_PATH = "/ping"


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

    model_config = api_config(
        {
            "rule": "!has(self.endpointPicker) || (has(self.enabled) && self.enabled)",
            "message": "endpointPicker needs enabled: true (it is how routing is served)",
        }
    )

    enabled: bool = Field(default=False, description="Deploy the router in front of the model replicas.")
    routing_strategy: RoutingStrategyField = Field(
        default=RoutingStrategy.PREFIXAWARE,
        description="random, roundrobin, leastoutstanding, session, prefixaware or kvaware (served as prefixaware). "
        "Changeable live.",
    )
    auto_scaling_spec: AutoScalingSpec | None = Field(
        default=None, description="Autoscaling through KEDA, as spec.autoScalingSpec (which wins if both are set)."
    )
    router_replicas: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="warmstart extension: router pods of this endpoint (default: the operator's, Helm "
        "router.replicas, 2). Each enforces maxConcurrentRequests on its own.",
    )
    router_config: RouterKnobs | None = Field(
        default=None,
        description="warmstart extension: the router's tuning knobs (docs/router.md); unset knobs keep their defaults.",
    )
    endpoint_picker: EndpointPickerSpec | None = Field(
        default=None,
        description="warmstart extension: serve routing as a Gateway API Inference Extension endpoint picker behind "
        "your own gateway (an InferencePool and the picker's pods; docs/gateway.md) instead of warmstart's proxy.",
    )


class RoutingAlgorithm(StrEnum):
    """The load balancer algorithms of HyperPod's `loadBalancer.routingAlgorithm`."""

    LEAST_OUTSTANDING_REQUESTS = "least_outstanding_requests"
    ROUND_ROBIN = "round_robin"


class LoadBalancer(ApiModel):
    """The balancer in front of the replicas: warmstart's router plays it (see README, "Load balancing")."""

    health_check_path: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^/.*",
        description="HTTP path the balancer checks on each replica: the model container's readiness probe (an HTTP "
        "GET on the invocation port) when worker.probes.readinessProbe is not set. Default /ping.",
    )
    routing_algorithm: RoutingAlgorithm | None = Field(
        default=None,
        description="least_outstanding_requests or round_robin: the router's strategy when intelligentRoutingSpec "
        "is not set.",
    )


class ModelMetrics(ApiModel):
    """Where the model container exposes metrics."""

    path: str = Field(default="/metrics", max_length=256, pattern=r"^/[a-zA-Z0-9\-_./]*$", description="Metrics path.")
    port: int = Field(default=8080, ge=1024, le=65535, description="Metrics port of the model container.")


class Metrics(ApiModel):
    """Metrics of the model pods: Prometheus scrape annotations, or a PodMonitor where that CRD is installed."""

    enabled: bool = Field(default=True, description="Scrape the model pods.")
    metrics_scrape_interval_seconds: int = Field(default=15, ge=5, le=300, description="Scrape interval in seconds.")
    model_metrics: ModelMetrics | None = Field(
        default=None, description="Where the model container serves metrics (default /metrics on port 8080)."
    )


class L2CacheSpec(ApiModel):
    """Second-level KV cache."""

    l2_cache_backend: str | None = Field(default=None, description="tieredstorage or redis.")
    l2_cache_local_url: str | None = Field(default=None, description="Redis URL when the backend is redis.")


class KvCacheSpec(ApiModel):
    """Managed KV cache tiers (accepted; not implemented by warmstart)."""

    cache_config_file: str | None = Field(default=None, description="KV cache configuration file.")
    enable_l1_cache: bool | None = Field(default=None, description="CPU-memory KV cache.")
    enable_l2_cache: bool | None = Field(default=None, description="Shared KV cache.")
    l2_cache_spec: L2CacheSpec | None = Field(default=None, description="L2 cache settings.")


class CustomCertificateConfig(ApiModel):
    """An ACM certificate for a custom domain."""

    acm_arn: str = Field(
        pattern=r"^arn:aws:acm:[a-z0-9-]+:[0-9]{12}:certificate/[a-fA-F0-9-]+$", description="ACM certificate ARN."
    )
    domain_name: str = Field(
        max_length=253,
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$",
        description="Custom domain name.",
    )


class TlsConfig(ApiModel):
    """TLS certificate output (accepted; not implemented by warmstart)."""

    tls_certificate_output_s3_uri: str | None = Field(
        default=None, pattern=r"^s3://([^/]+)/?(.*)$", description="S3 URI for the certificate."
    )
    custom_certificate_config: CustomCertificateConfig | None = Field(
        default=None, description="ACM certificate for a custom domain."
    )


class DnsConfig(ApiModel):
    """Route53 DNS automation for the custom domain of tlsConfig (accepted; not implemented by warmstart)."""

    hosted_zone_id: str = Field(pattern=r"^Z[A-Z0-9]+$", description="Route53 hosted zone ID.")


DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


#: at most this many `kubernetes.volumes`: bounds the cost of the CRD rule that finds the model volume among them
MAX_POD_VOLUMES = 128


class KubernetesSettings(ApiModel):
    """Pod-level Kubernetes settings of the model pods."""

    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Service account of the model pods and preload Jobs.",
    )
    scheduler_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="Scheduler of the model pods."
    )
    init_containers: list[dict[str, Any]] | None = Field(
        default=None,
        description="Init containers (core/v1 Container) of the model pods, run after warmstart's cold-node preload "
        "init container, so they see the model files.",
    )
    volumes: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=MAX_POD_VOLUMES,
        description="Extra volumes (core/v1 Volume) of the model pods, for the init containers. With modelSourceType "
        "kubernetesVolume and no kubernetesVolume block, the one named as worker.modelVolumeMount.name is the model "
        "volume.",
        # a core/v1 Volume kept as written; its name declared, so the CRD's rules can find the model volume
        json_schema_extra={
            "items": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"name": {"type": "string", "maxLength": 63, "description": "Name of the volume."}},
            }
        },
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
