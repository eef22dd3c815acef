"""Operator settings, read once from the environment (WARMSTART_*, as the Helm chart sets them) at start-up.

`from_env` is the only place that reads the operator's environment. `warmstart operator` calls it once; the settings
then travel to handlers in kopf's memo (`memo.settings`) and to handler registration (timer intervals).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from warmstart.render.context import RenderContext


class OperatorSettings(BaseModel):
    """How this operator process runs."""

    namespaces: list[str] = Field(default_factory=list, description="Namespaces to watch; empty means all.")
    metrics_port: int = Field(default=8080, description="Prometheus metrics port.")
    health_port: int = Field(default=8081, description="Liveness/readiness port (kopf probes).")
    resync_seconds: float = Field(
        default=10.0,
        description="Safety-net interval of each object's status loop; status follows events (controllers/waking.py).",
    )
    peering: str | None = Field(default=None, description="kopf peering name for HA; None runs standalone.")
    peering_priority: int | None = Field(
        default=None, description="kopf peering priority; None picks a random one at start."
    )
    render: RenderContext = Field(default_factory=RenderContext)


def _json_map(raw: str | None) -> dict[str, str]:
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def _json_list(raw: str) -> list[Any]:
    value = json.loads(raw)
    if not isinstance(value, list):
        raise ValueError("expected a JSON array")
    return value


def _json_groups(raw: str | None) -> dict[str, list[str]]:
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
        raise ValueError("expected a JSON object of name -> list of namespaces")
    return {str(k): [str(n) for n in v] for k, v in value.items()}


def from_env(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Read WARMSTART_* variables; unset ones keep their defaults."""
    env = os.environ if env is None else env
    render: dict[str, object] = {}
    for field, var in {
        "operator_image": "WARMSTART_OPERATOR_IMAGE",
        "image_pull_policy": "WARMSTART_IMAGE_PULL_POLICY",
        "prepull_priority_class": "WARMSTART_PREPULL_PRIORITY_CLASS",
        "jumpstart_bucket": "WARMSTART_JUMPSTART_BUCKET",
        "jumpstart_gated_bucket": "WARMSTART_JUMPSTART_GATED_BUCKET",
        "jumpstart_region": "WARMSTART_JUMPSTART_REGION",
    }.items():
        if env.get(var):
            render[field] = env[var]
    render["preload_pod_annotations"] = _json_map(env.get("WARMSTART_PRELOAD_POD_ANNOTATIONS"))
    render["router_node_selector"] = _json_map(env.get("WARMSTART_ROUTER_NODE_SELECTOR"))
    if env.get("WARMSTART_ROUTER_ADMIN_FROM"):
        render["router_admin_from"] = tuple(_json_list(env["WARMSTART_ROUTER_ADMIN_FROM"]))
    if env.get("WARMSTART_ROUTER_TRUSTED_PROXIES"):
        render["router_trusted_proxies"] = tuple(str(e) for e in _json_list(env["WARMSTART_ROUTER_TRUSTED_PROXIES"]))
    if env.get("WARMSTART_ROUTER_REPLICAS"):
        render["router_replicas"] = int(env["WARMSTART_ROUTER_REPLICAS"])
    if env.get("WARMSTART_PRELOAD_ENV_NAMES"):
        render["preload_env_names"] = sorted(str(n) for n in _json_list(env["WARMSTART_PRELOAD_ENV_NAMES"]))
    render["preload_endpoints"] = _json_map(env.get("WARMSTART_PRELOAD_ENDPOINTS"))
    if env.get("WARMSTART_PRELOAD_ENV_SECRET"):
        render["preload_env_secret"] = env["WARMSTART_PRELOAD_ENV_SECRET"]
    if env.get("WARMSTART_ALLOWED_HOST_PATHS"):
        render["allowed_host_paths"] = [str(p) for p in _json_list(env["WARMSTART_ALLOWED_HOST_PATHS"])]
    if env.get("WARMSTART_EXTRA_TOLERATIONS"):
        render["extra_tolerations"] = _json_list(env["WARMSTART_EXTRA_TOLERATIONS"])
    render["cache_sharing_groups"] = _json_groups(env.get("WARMSTART_CACHE_SHARING_GROUPS"))
    if env.get("WARMSTART_FSX_FILE_SYSTEMS"):
        render["fsx_file_systems"] = json.loads(env["WARMSTART_FSX_FILE_SYSTEMS"])
    for field, var in {
        "preload_concurrency_nodes": "WARMSTART_PRELOAD_CONCURRENCY_NODES",
        "preload_concurrency_percent": "WARMSTART_PRELOAD_CONCURRENCY_PERCENT",
    }.items():
        if env.get(var):
            render[field] = int(env[var])
    if env.get("WARMSTART_CACHE_ACCESS"):
        render["cache_access"] = env["WARMSTART_CACHE_ACCESS"]
    if env.get("WARMSTART_JOB_SIGNING_KEY"):
        render["job_signing_key"] = env["WARMSTART_JOB_SIGNING_KEY"]
    if env.get("WARMSTART_CACHE_EVICTION_POLICY"):
        render["cache_eviction_policy"] = env["WARMSTART_CACHE_EVICTION_POLICY"]
    region = env.get("WARMSTART_AWS_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        render["aws_region"] = region
    settings: dict[str, object] = {"render": RenderContext.model_validate(render)}
    if env.get("WARMSTART_NAMESPACES"):
        settings["namespaces"] = [n.strip() for n in env["WARMSTART_NAMESPACES"].split(",") if n.strip()]
    for field, var in {
        "metrics_port": "WARMSTART_METRICS_PORT",
        "health_port": "WARMSTART_HEALTH_PORT",
        "peering_priority": "WARMSTART_PEERING_PRIORITY",
    }.items():
        if env.get(var):
            settings[field] = int(env[var])
    if env.get("WARMSTART_RESYNC_SECONDS"):
        settings["resync_seconds"] = float(env["WARMSTART_RESYNC_SECONDS"])
    if env.get("WARMSTART_PEERING"):
        settings["peering"] = env["WARMSTART_PEERING"]
    return OperatorSettings.model_validate(settings)
