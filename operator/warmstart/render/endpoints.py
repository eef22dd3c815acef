"""One pipeline for both endpoint kinds: an IEC or a resolved JumpStartModel becomes an `Endpoint`.

Everything downstream (caches, gate, Deployment, router, status) reads only this model, so the two kinds cannot
drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from warmstart.api import API_VERSION, strategies
from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.base import ParentReference
from warmstart.api.blocks import (
    DEFAULT_HOST_PATH,
    IntelligentRoutingSpec,
    KubernetesSettings,
    LoadBalancer,
    Metrics,
    WeightsCache,
)
from warmstart.api.caches import NodeTargeting
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.gateways import EndpointPickerSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.scheduling import NodeAffinity
from warmstart.api.sources import ModelSourceConfig, ModelSourceType
from warmstart.api.strategies import RoutingStrategy
from warmstart.api.workers import (
    EnvironmentVariable,
    ModelInvocationPort,
    ModelVolumeMount,
    RequestLimits,
    Resources,
    Worker,
)
from warmstart.placement import accelerator_request, instance_type_affinity
from warmstart.render import keys, names

JUMPSTART_PORT = 8080
JUMPSTART_MOUNT = "/opt/ml/model"
#: the JumpStart (TGI/DJL/vLLM container) variable that says how many GPUs the server shards over
NUM_GPUS_ENV = "SM_NUM_GPUS"


class ObjectRef(BaseModel):
    """Identity of the endpoint object."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    namespace: str
    uid: str
    generation: int = 1

    def parent(self) -> ParentReference:
        return ParentReference(api_version=API_VERSION, kind=self.kind, name=self.name, uid=self.uid)


class Endpoint(BaseModel):
    """The resolved, kind-independent view of an endpoint."""

    ref: ObjectRef
    model_name: str
    source: ModelSourceConfig
    worker: Worker
    instance_types: list[str] | None = None
    node_affinity: NodeAffinity | None = None
    replicas: int = 1
    max_deploy_time_seconds: int = 3600
    weights_cache: WeightsCache | None = None
    image_cache: bool = False
    routing: IntelligentRoutingSpec | None = None
    kubernetes: KubernetesSettings | None = None
    metrics: Metrics | None = None
    load_balancer: LoadBalancer | None = None
    resolved_env: dict[str, str] = Field(default_factory=dict)
    auto_scaling: AutoScalingSpec | None = None

    @property
    def child_name(self) -> str:
        """Name of the model Deployment and Service (and stem of the router's): a DNS-1035 label."""
        return names.child_name(self.ref.name)

    @property
    def label_value(self) -> str:
        """The endpoint's name as a label value on its children and pods."""
        return names.label_value(self.ref.name)

    @property
    def model_on_volume(self) -> bool:
        """HyperPod's kubernetesVolume without a claim: the model volume is the user's `kubernetes.volumes` entry
        named `worker.modelVolumeMount.name`, mounted as it is (nothing to preload, nothing to cache)."""
        source = self.source
        return source.model_source_type == ModelSourceType.KUBERNETES_VOLUME and source.kubernetes_volume is None

    @property
    def weights_enabled(self) -> bool:
        return bool(self.weights_cache and self.weights_cache.enabled) and not self.model_on_volume

    @property
    def host_path(self) -> str:
        return self.weights_cache.host_path if self.weights_cache else DEFAULT_HOST_PATH

    @property
    def routing_enabled(self) -> bool:
        return bool(self.routing and self.routing.enabled)

    @property
    def endpoint_picker(self) -> EndpointPickerSpec | None:
        """Gateway mode's setting while routing is on (an InferencePool and the picker), else None."""
        return self.routing.endpoint_picker if self.routing is not None and self.routing.enabled else None

    @property
    def proxy_enabled(self) -> bool:
        """Whether warmstart's proxy router serves this endpoint (routing on, not in gateway mode)."""
        return self.routing_enabled and self.endpoint_picker is None

    @property
    def metrics_enabled(self) -> bool:
        """Whether the model pods are scraped: a `metrics` block with `enabled` (true by default, as HyperPod)."""
        return bool(self.metrics and self.metrics.enabled)

    @property
    def routing_strategy(self) -> RoutingStrategy:
        return self.routing.routing_strategy if self.routing else RoutingStrategy.RANDOM

    def targeting(self) -> NodeTargeting:
        """The nodes the caches cover: the required part of the endpoint's placement."""
        if self.node_affinity is not None:
            required = self.node_affinity.required_during_scheduling_ignored_during_execution
            affinity = NodeAffinity(required_during_scheduling_ignored_during_execution=required) if required else None
            return NodeTargeting(node_affinity=affinity)
        if self.instance_types:
            return NodeTargeting(node_affinity=instance_type_affinity(self.instance_types))
        return NodeTargeting()

    def weights_key(self, groups: Mapping[str, Sequence[str]]) -> str:
        """The weights key in this endpoint's namespace, given the admin's cache sharing groups."""
        return keys.weights_key_in(self.source, self.host_path, self.ref.namespace, groups)

    def image_key(self) -> str:
        return keys.image_key(self.worker.image, self.targeting())


def routing_of(
    routing: IntelligentRoutingSpec | None, load_balancer: LoadBalancer | None, limits: RequestLimits | None = None
) -> IntelligentRoutingSpec | None:
    """The router an endpoint gets: its intelligentRoutingSpec, else one running `loadBalancer.routingAlgorithm`,
    else, when `requestLimits.maxConcurrentRequests` is set, one running the default `random` strategy.

    warmstart's router is the balancer in front of the replicas, so an explicit routing algorithm is its strategy
    (least_outstanding_requests -> leastoutstanding, round_robin -> roundrobin) when intelligentRoutingSpec is absent.
    The router is also what enforces the per-replica concurrency cap, its queue and the overflow status (a Service
    cannot count requests), so request limits alone bring one; `random` spreads requests as the Service would.
    An intelligentRoutingSpec with `enabled: false` is the user's explicit choice: no router, and the limits are
    named as not acted on (render/unsupported.py).
    """
    if routing is not None:
        return routing
    if load_balancer is not None and load_balancer.routing_algorithm is not None:
        return IntelligentRoutingSpec(
            enabled=True, routing_strategy=strategies.parse(load_balancer.routing_algorithm.value)
        )
    if limits is not None and limits.max_concurrent_requests is not None:
        return IntelligentRoutingSpec(enabled=True, routing_strategy=RoutingStrategy.RANDOM)
    return None


def from_iec(ref: ObjectRef, spec: InferenceEndpointConfigSpec) -> Endpoint:
    """An InferenceEndpointConfig as an Endpoint."""
    cache = spec.model_cache_config
    worker = spec.worker
    if spec.environment_variables:
        merged = [*(worker.environment_variables or []), *spec.environment_variables]
        worker = worker.model_copy(update={"environment_variables": merged})
    instance_types = spec.instance_types or ([spec.instance_type] if spec.instance_type else None)
    return Endpoint(
        ref=ref,
        model_name=spec.model_name,
        source=spec.model_source_config,
        worker=worker,
        instance_types=instance_types,
        node_affinity=spec.node_affinity,
        replicas=spec.replicas,
        max_deploy_time_seconds=spec.max_deploy_time_in_seconds,
        weights_cache=cache.weights_cache if cache else None,
        image_cache=bool(cache and cache.image_cache and cache.image_cache.enabled),
        routing=routing_of(spec.intelligent_routing_spec, spec.load_balancer, worker.request_limits),
        kubernetes=spec.kubernetes,
        metrics=spec.metrics,
        load_balancer=spec.load_balancer,
        auto_scaling=spec.auto_scaling_spec,
    )


class JumpStartResolution(BaseModel):
    """What a JumpStart model id and version resolve to (filled by the controller from the manifest)."""

    bucket: str
    prefix: str
    region: str
    image: str
    env: dict[str, str] = Field(default_factory=dict)
    gated: bool = False
    #: accelerators one replica needs, as the JumpStart spec says (None: take the instance type's)
    accelerators: int | None = None


def from_jumpstart(ref: ObjectRef, spec: JumpStartModelSpec, resolution: JumpStartResolution) -> Endpoint:
    """A resolved JumpStartModel as an Endpoint: S3 weights, the default image and environment, the accelerators.

    A gated model's artifacts are read with `gatedModelDownloadRole` (assumed through STS by the preload). The pods
    request the GPUs that SM_NUM_GPUS (the user's, else JumpStart's), else the spec's resource requirements, else the
    instance type say; one MIG slice (and SM_NUM_GPUS=1) with `acceleratorPartitionType`.
    """
    s3: dict[str, str] = {"bucketName": resolution.bucket, "region": resolution.region}
    if resolution.gated and spec.model.gated_model_download_role:
        s3["roleArn"] = spec.model.gated_model_download_role
    source = ModelSourceConfig.model_validate(
        {"modelSourceType": "s3", "s3Storage": s3, "modelLocation": resolution.prefix}
    )
    env = {
        **resolution.env,
        **{e.name: e.value or "" for e in spec.environment_variables or [] if e.value_from is None},
    }
    partition = spec.server.accelerator_partition_type
    if partition:
        env[NUM_GPUS_ENV] = "1"
    wanted = int(env[NUM_GPUS_ENV]) if env.get(NUM_GPUS_ENV, "").isdigit() else resolution.accelerators
    devices: dict[str, int | str] = dict(accelerator_request(spec.server.instance_type, wanted, partition))
    extra = [e for e in spec.environment_variables or [] if e.value_from is not None]
    variables = [EnvironmentVariable(name=k, value=v) for k, v in sorted(env.items())] + extra
    worker = Worker(
        image=spec.server.image or resolution.image,
        environment_variables=variables,
        model_invocation_port=ModelInvocationPort(container_port=JUMPSTART_PORT),
        model_volume_mount=ModelVolumeMount(name="model-weights", mount_path=JUMPSTART_MOUNT),
        resources=Resources(limits=devices, requests=dict(devices)) if devices else Resources(),
        request_limits=spec.request_limits,
    )
    name = spec.model.model_id.lower().replace("_", "-").replace(".", "-")[:63].strip("-")
    return Endpoint(
        ref=ref,
        model_name=name,
        source=source,
        worker=worker,
        instance_types=[spec.server.instance_type],
        replicas=spec.replicas,
        max_deploy_time_seconds=spec.max_deploy_time_in_seconds,
        weights_cache=spec.model_cache_config.weights_cache if spec.model_cache_config else None,
        image_cache=bool(
            spec.model_cache_config
            and spec.model_cache_config.image_cache
            and spec.model_cache_config.image_cache.enabled
        ),
        routing=routing_of(spec.intelligent_routing_spec, spec.load_balancer, spec.request_limits),
        kubernetes=spec.kubernetes,
        metrics=spec.metrics,
        load_balancer=spec.load_balancer,
        resolved_env=resolution.env,
        auto_scaling=spec.auto_scaling_spec,
    )
