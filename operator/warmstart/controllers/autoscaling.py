"""Decide the endpoint's KEDA ScaledObject and its `Autoscaling` condition; never drop autoScalingSpec silently.

- autoScalingSpec set, KEDA's ScaledObject CRD present, settings usable: the ScaledObject joins the endpoint's
  children, and `Autoscaling` is True (`ScaledObjectApplied`).
- No ScaledObject CRD: `Autoscaling` False, `KedaNotInstalled`, saying what to install; nothing else fails.
- Settings that cannot work (no trigger, max below min, a trigger without its query): False, `InvalidAutoscaling`.
- autoScalingSpec removed after it was in force: the ScaledObject is deleted, `Autoscaling` False, `NotRequested`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from warmstart.api.base import Condition
from warmstart.api.states import ConditionType
from warmstart.controllers.storage import Store
from warmstart.render import autoscaling
from warmstart.render.conditions import condition
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

KEDA_NOT_INSTALLED = "KedaNotInstalled"
INVALID = "InvalidAutoscaling"
APPLIED = "ScaledObjectApplied"
NOT_REQUESTED = "NotRequested"


@dataclass(frozen=True)
class Plan:
    """What the reconcile applies, reports and removes for autoscaling."""

    manifests: list[Manifest] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    remove: bool = False


def region(context: RenderContext) -> str:
    """The operator's AWS region (WARMSTART_AWS_REGION or the SDK's AWS_REGION), else the JumpStart region."""
    return context.aws_region or context.jumpstart_region


def keda_installed(store: Store) -> bool:
    return store.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", autoscaling.CRD_NAME) is not None


def plan(store: Store, endpoint: Endpoint, context: RenderContext, old_status: Mapping[str, Any]) -> Plan:
    """The ScaledObject to apply (if any), the `Autoscaling` condition, and whether to delete an old ScaledObject."""
    generation = endpoint.ref.generation
    spec = autoscaling.spec_of(endpoint)
    had = any(c.get("type") == ConditionType.AUTOSCALING for c in old_status.get("conditions") or [])
    if spec is None:
        if not had:
            return Plan()
        gone = condition(ConditionType.AUTOSCALING, False, NOT_REQUESTED, "no autoScalingSpec", generation)
        return Plan(conditions=[gone], remove=keda_installed(store))
    if not keda_installed(store):
        message = (
            f"autoScalingSpec needs KEDA: the CRD {autoscaling.CRD_NAME} is not installed, so no ScaledObject was "
            f"created and replicas stay at spec.replicas ({endpoint.replicas}). Install KEDA (v2), then the "
            "endpoint is scaled on its next reconcile"
        )
        return Plan(conditions=[condition(ConditionType.AUTOSCALING, False, KEDA_NOT_INSTALLED, message, generation)])
    problems = autoscaling.problems(spec)
    if problems:
        message = "autoScalingSpec cannot work: " + "; ".join(problems)
        return Plan(conditions=[condition(ConditionType.AUTOSCALING, False, INVALID, message, generation)])
    manifest = autoscaling.scaled_object(endpoint, spec, region(context))
    message = (
        f"ScaledObject {autoscaling.name(endpoint)} scales {endpoint.ref.kind} {endpoint.ref.name} between "
        f"{spec.min_replica_count} and {spec.max_replica_count} replicas "
        f"on {len(manifest['spec']['triggers'])} triggers"
    )
    return Plan(
        manifests=[manifest], conditions=[condition(ConditionType.AUTOSCALING, True, APPLIED, message, generation)]
    )


def remove(store: Store, endpoint: Endpoint) -> None:
    """Delete the endpoint's ScaledObject (KEDA then deletes its HPA)."""
    store.delete(autoscaling.API_VERSION, autoscaling.KIND, autoscaling.name(endpoint), endpoint.ref.namespace)
