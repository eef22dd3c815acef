"""HyperPod's status blocks: deploymentStatus mirrors the model Deployment with AWS's field names, and moves
`lastUpdated` only when something else changed; metricsStatus says whether and how metrics are collected."""

from __future__ import annotations

from typing import Any

from warmstart.api.states import ConditionType, EndpointState
from warmstart.render import hyperpod_status
from warmstart.render.conditions import condition

DEPLOYMENT: dict[str, Any] = {
    "metadata": {"name": "example-model", "generation": 2},
    "status": {
        "observedGeneration": 2,
        "replicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "updatedReplicas": 2,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
    },
}
CONDS = [condition(ConditionType.READY, True, "Serving", "2/2 replicas available", 2)]


def test_deployment_status_has_aws_names_and_the_endpoint_state() -> None:
    block = hyperpod_status.deployment_status(DEPLOYMENT, EndpointState.DEPLOYMENT_COMPLETE, CONDS, None, "T1")
    assert block == {
        "name": "example-model",
        "deploymentObjectOverallState": "DeploymentComplete",
        "reason": "Serving",
        "message": "2/2 replicas available",
        "lastUpdated": "T1",
        "status": {
            "replicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "updatedReplicas": 2,
            "observedGeneration": 2,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
        },
    }
    assert hyperpod_status.deployment_status(None, EndpointState.DEPLOYMENT_PENDING, CONDS, None, "T1") is None


def test_last_updated_moves_only_when_the_block_changes() -> None:
    first = hyperpod_status.deployment_status(DEPLOYMENT, EndpointState.DEPLOYMENT_COMPLETE, CONDS, None, "T1")
    same = hyperpod_status.deployment_status(DEPLOYMENT, EndpointState.DEPLOYMENT_COMPLETE, CONDS, first, "T2")
    assert same == first
    scaled = {**DEPLOYMENT, "status": {**DEPLOYMENT["status"], "replicas": 3, "unavailableReplicas": 1}}
    moved = hyperpod_status.deployment_status(scaled, EndpointState.DEPLOYMENT_IN_PROGRESS, CONDS, first, "T3")
    assert moved is not None and moved["lastUpdated"] == "T3" and moved["status"]["unavailableReplicas"] == 1


def test_metrics_status_says_how_metrics_are_collected() -> None:
    assert hyperpod_status.metrics_status(True, True, 30, 8080, "/metrics") == {
        "enabled": True,
        "state": "PodMonitor",
        "metricsScrapeIntervalSeconds": 30,
        "modelMetrics": {"port": 8080, "path": "/metrics"},
    }
    assert hyperpod_status.metrics_status(True, False, 15, 8000, "/m")["state"] == "ScrapeAnnotations"
    assert hyperpod_status.metrics_status(False, True, 15, 8080, "/metrics") == {"enabled": False}
