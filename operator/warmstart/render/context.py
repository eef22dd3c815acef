"""The small typed context every renderer gets: operator-wide settings that are not part of any spec."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from warmstart.api import preloading, routers
from warmstart.api.blocks import DEFAULT_HOST_PATH
from warmstart.api.sources import FsxStorage
from warmstart.render import cache_volumes, nvme_budget, throttling, tolerations

#: the CSI driver's Job signing key (an HMAC key): the chart generates 48 random characters
MIN_SIGNING_KEY_CHARS = 32


class RenderContext(BaseModel):
    """Operator-wide settings that shape rendered children (images, annotations, environment)."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a stale setting name fails loudly

    operator_image: str = Field(
        default="warmstart:0.1.0", description="Image with the warmstart entrypoint (preload, router, no-op)."
    )
    image_pull_policy: str = Field(default="IfNotPresent", description="Pull policy of the operator image.")
    preload_pod_annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations on every preload Job pod."
    )
    preload_env_names: tuple[str, ...] = Field(
        default=(),
        description=(
            "Environment variables of preload containers (e.g. credentials), each read from the key of that name in the"
            " Secret `preload_env_secret` of the pod's namespace: values never appear in a pod spec. Never a"
            " connection setting (api.preloading.CONNECTION_ENV): a tenant may be able to edit that Secret."
        ),
    )
    preload_endpoints: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Connection settings of every preload container (mirror endpoints such as HF_ENDPOINT or"
            " AWS_ENDPOINT_URL_S3, proxies, CA bundles), as plain values the cluster admin chose: tenants cannot"
            " change them, so a shared cache is never filled through a tenant's mirror."
        ),
    )
    preload_env_secret: str = Field(
        default="warmstart-preload-env", description="Secret in each namespace holding the preload environment."
    )
    router_node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector of the router pods (empty: any node)."
    )
    router_admin_from: tuple[dict[str, Any], ...] = Field(
        default=(),
        description=(
            "NetworkPolicy peers (namespaceSelector/podSelector/ipBlock) that may reach the router pods' admin port"
            " (/metrics, /router/status); none: only the traffic port is reachable over the pod network."
        ),
    )
    router_trusted_proxies: tuple[str, ...] = Field(
        default=(),
        description=(
            "Addresses or CIDRs of the proxies in front of the routers (Helm router.trustedProxies): from them, a"
            " router takes the client of a request's per-client shares from X-Forwarded-For. Empty: the TCP peer."
        ),
    )
    router_replicas: int = Field(
        default=2, ge=1, le=64, description="Router pods of an endpoint that does not set routerReplicas."
    )
    prepull_priority_class: str = Field(
        default="warmstart-prepull", description="PriorityClass of image pre-pull pods."
    )
    preload_backoff_limit: int = Field(default=2, description="Pod retries inside one preload Job (network blips).")
    preload_active_deadline_seconds: int = Field(default=4 * 3600, description="Hard cap on one preload Job.")
    preload_ttl_seconds_after_finished: int = Field(
        default=3600, description="Finished preload Jobs are garbage-collected after this."
    )
    jumpstart_bucket: str | None = Field(default=None, description="Override of the JumpStart content bucket.")
    jumpstart_gated_bucket: str | None = Field(
        default=None, description="Override of the JumpStart gated content bucket."
    )
    jumpstart_region: str = Field(default="us-west-2", description="Region of the JumpStart buckets.")
    preload_concurrency_nodes: int = Field(
        default=throttling.DEFAULT_NODES,
        ge=1,
        description="At least this many nodes may preload one cache at once (Helm cache.preloadConcurrency.nodes).",
    )
    preload_concurrency_percent: int = Field(
        default=throttling.DEFAULT_PERCENT,
        ge=1,
        le=100,
        description="Or this percentage of its target nodes, when more (Helm cache.preloadConcurrency.percent).",
    )
    cache_eviction_policy: nvme_budget.EvictionPolicy = Field(
        default=nvme_budget.EvictionPolicy.NEVER,
        description="Never, or EvictUnreferencedLRU: make room on a node by evicting caches no endpoint references.",
    )
    aws_region: str | None = Field(
        default=None,
        description="The operator's AWS region (CloudWatch triggers); unset: the JumpStart region.",
    )
    extra_tolerations: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="Tolerations of cache pods besides the GPU node-pool ones (Helm cache.extraTolerations).",
    )
    allowed_host_paths: tuple[str, ...] = Field(
        default=(DEFAULT_HOST_PATH,),
        description="Cache roots a weights cache may use (its hostPath equals one or lies under one).",
    )
    pod_monitors: bool = Field(
        default=False,
        description="The PodMonitor CRD (monitoring.coreos.com) is installed: endpoint metrics get a PodMonitor "
        "instead of prometheus.io scrape annotations. Detected at operator start-up.",
    )
    fsx_file_systems: dict[str, tuple[FsxStorage, ...]] = Field(
        default_factory=dict,
        description=(
            "FSx file systems each namespace may mount (namespace -> file systems with id, DNS and mount name): the"
            " cluster admin's allowlist (Helm fsx.allowedFileSystems). Any other file system is refused."
        ),
    )
    resource_claims: bool = Field(
        default=False,
        description="The API server serves resource.k8s.io/v1 (dynamic resource allocation): model pods may use "
        "worker.resources.claims. Detected at operator start-up.",
    )
    cache_access: cache_volumes.CacheAccess = Field(
        default=cache_volumes.CacheAccess.HOST_PATH,
        description="How pods reach the node cache (Helm cache.access): `csi` (the warmstart CSI driver; tenant pods"
        " carry no hostPath and no root step) or `hostPath` (needs privileged namespaces). render/cache_volumes.py.",
    )
    job_signing_key: SecretStr = Field(
        default=SecretStr(""),
        description="Key of the operator's signature on its cache-writing Jobs, which the CSI driver checks"
        " (render/signatures.py); required with cache access `csi`. Never rendered into a manifest.",
    )
    cache_sharing_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Trust groups: name -> namespaces that may share credentialed weights caches (render/scopes.py).",
    )

    @field_validator("extra_tolerations")
    @classmethod
    def _never_node_gone(cls, extra: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        for toleration in extra:
            if tolerations.tolerates_node_gone(toleration):
                raise ValueError(
                    f"cache.extraTolerations entry {toleration} tolerates node.kubernetes.io/not-ready or unreachable:"
                    " cache pods must leave nodes that went away; give a key"
                )
        return extra

    @field_validator("router_trusted_proxies")
    @classmethod
    def _proxy_networks(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        return routers.proxy_networks(entries, "router.trustedProxies")

    @field_validator("preload_env_names")
    @classmethod
    def _no_connection_from_secrets(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        chosen = sorted(set(names) & preloading.CONNECTION_ENV)
        if chosen:
            raise ValueError(
                f"preload.env may not set {', '.join(chosen)}: its values reach pods from a Secret in each tenant"
                " namespace, so a tenant could point a shared cache at its own mirror; set them in preload.endpoints"
            )
        return names

    @field_validator("preload_endpoints")
    @classmethod
    def _connection_only(cls, endpoints: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(endpoints) - preloading.CONNECTION_ENV)
        if unknown:
            raise ValueError(
                f"preload.endpoints may set only connection settings ({', '.join(sorted(preloading.CONNECTION_ENV))});"
                f" not {', '.join(unknown)} (put those in preload.env)"
            )
        for name, value in endpoints.items():
            if preloading.redact(value) != value:
                raise ValueError(f"preload.endpoints.{name} carries credentials in its URL; use preload.env for them")
        return endpoints

    @field_validator("fsx_file_systems")
    @classmethod
    def _complete_file_systems(cls, allowed: dict[str, tuple[FsxStorage, ...]]) -> dict[str, tuple[FsxStorage, ...]]:
        for namespace, systems in allowed.items():
            for system in systems:
                if not (system.dns_name and system.mount_name):
                    raise ValueError(
                        f"fsx.allowedFileSystems.{namespace}: {system.file_system_id} needs dnsName and mountName"
                    )
        return allowed

    @model_validator(mode="after")
    def _csi_needs_a_key(self) -> RenderContext:
        key = self.job_signing_key.get_secret_value()
        if self.cache_access == cache_volumes.CacheAccess.CSI and len(key) < MIN_SIGNING_KEY_CHARS:
            raise ValueError(
                f"cache access csi needs a Job signing key of at least {MIN_SIGNING_KEY_CHARS} characters"
                f" (WARMSTART_JOB_SIGNING_KEY from the chart's Secret, or csi.signingKeySecret); it has {len(key)}"
            )
        return self

    @field_validator("cache_sharing_groups")
    @classmethod
    def _one_group_per_namespace(cls, groups: dict[str, list[str]]) -> dict[str, list[str]]:
        seen: dict[str, str] = {}
        for name, members in sorted(groups.items()):
            if not name:
                raise ValueError("a cache sharing group needs a name")
            for namespace in members:
                if namespace in seen and seen[namespace] != name:
                    raise ValueError(
                        f"namespace {namespace!r} is in two cache sharing groups: {seen[namespace]}, {name}"
                    )
                seen[namespace] = name
        return groups
