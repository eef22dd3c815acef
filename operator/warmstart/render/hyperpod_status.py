"""HyperPod's status blocks that its tools read: `deploymentStatus` (the model Deployment) and `metricsStatus`.

AWS's CLI (`hyp list`/`describe`) and dashboards read `status.deploymentStatus.deploymentObjectOverallState` and the
Deployment's replica counts there; warmstart writes them with AWS's meaning. `lastUpdated` moves only when the rest
of the block changes, so an unchanged endpoint writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warmstart.api.base import Condition
from warmstart.api.states import ConditionType, EndpointState
from warmstart.api.statuses import DeploymentObjectStatus, DeploymentStatus, MetricsStatus, ModelMetricsStatus
from warmstart.render import deployments
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

#: the Deployment status fields HyperPod's deploymentStatus.status carries
_COUNTS = ("replicas", "readyReplicas", "availableReplicas", "updatedReplicas", "unavailableReplicas")


def deployment_status(
    deployment: Mapping[str, Any] | None,
    state: EndpointState,
    conds: list[Condition],
    old: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any] | None:
    """The `deploymentStatus` block (API spelling) for the model Deployment; None before it exists."""
    if deployment is None:
        return None
    observed = deployment.get("status") or {}
    ready = next((c for c in conds if c.type == ConditionType.READY), None)
    block = DeploymentStatus(
        name=deployment["metadata"]["name"],
        deployment_object_overall_state=state,
        reason=ready.reason if ready else None,
        message=ready.message if ready else None,
        status=DeploymentObjectStatus.model_validate(
            {
                **{key: observed[key] for key in _COUNTS if key in observed},
                "observedGeneration": observed.get("observedGeneration"),
                "conditions": observed.get("conditions"),
            }
        ),
    ).to_api()
    previous = dict(old or {})
    stamp = previous.pop("lastUpdated", None)
    block["lastUpdated"] = stamp if stamp and previous == block else now
    return block


def metrics_status(enabled: bool, pod_monitors: bool, interval: int, port: int, path: str) -> dict[str, Any]:
    """The `metricsStatus` block: whether and how the model pods' metrics are collected."""
    if not enabled:
        return MetricsStatus(enabled=False).to_api()
    return MetricsStatus(
        enabled=True,
        state="PodMonitor" if pod_monitors else "ScrapeAnnotations",
        metrics_scrape_interval_seconds=interval,
        model_metrics=ModelMetricsStatus(port=port, path=path),
    ).to_api()


def blocks(
    endpoint: Endpoint,
    context: RenderContext,
    deployment: Mapping[str, Any] | None,
    state: EndpointState,
    conds: list[Condition],
    old_status: Mapping[str, Any],
    now: str,
) -> dict[str, Any]:
    """HyperPod's `deploymentStatus` and `metricsStatus`, where they apply (a block left out is removed)."""
    _, port, path = deployments.metrics_port(endpoint)
    interval = endpoint.metrics.metrics_scrape_interval_seconds if endpoint.metrics else 0
    found = {
        "deploymentStatus": deployment_status(deployment, state, conds, old_status.get("deploymentStatus"), now),
        "metricsStatus": (
            metrics_status(endpoint.metrics_enabled, context.pod_monitors, interval, port, path)
            if endpoint.metrics is not None
            else None
        ),
    }
    return {key: value for key, value in found.items() if value is not None}
