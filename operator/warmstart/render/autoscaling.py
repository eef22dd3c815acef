"""The KEDA ScaledObject of an endpoint with autoScalingSpec: it scales the endpoint through its scale subresource.

KEDA's HPA writes `spec.replicas` of the InferenceEndpointConfig (or JumpStartModel), and the operator carries it to
the Deployment, so the cache gate and the rolling-update rules stay in force while KEDA scales. The ScaledObject
carries a controller owner reference to the endpoint, so it goes with it.

Trigger mapping (HyperPod field -> KEDA metadata):
- prometheus: serverAddress, query, targetValue -> threshold, activationTargetValue -> activationThreshold, namespace,
  customHeaders; an AMP workspace address adds awsRegion (from the address) and identityOwner=operator, so KEDA signs
  the queries (SigV4) with its own identity, as HyperPod's KEDA does;
- aws-cloudwatch: namespace, metricName, dimensions -> dimensionName/dimensionValue (';'-separated), targetValue ->
  targetMetricValue, activationTargetValue -> activationTargetMetricValue, minValue -> minMetricValue, metricStat,
  metricCollectionPeriod -> metricStatPeriod, metricCollectionStartTime -> metricCollectionTime, awsRegion (the
  operator's region) and identityOwner=operator;
- metricType Average -> AverageValue, Value -> Value; useCachedMetrics as is.
"""

from __future__ import annotations

import re
from typing import Any

from warmstart.api.autoscaling import AutoScalingSpec, CloudWatchTrigger, MetricType, PrometheusTrigger
from warmstart.render import labels, owners
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
CRD_NAME = "scaledobjects.keda.sh"
_AMP_REGION = re.compile(r"^https://aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com/")
_METRIC_TYPES = {MetricType.AVERAGE: "AverageValue", MetricType.VALUE: "Value"}


def spec_of(endpoint: Endpoint) -> AutoScalingSpec | None:
    """The autoscaling settings in force: spec.autoScalingSpec, else intelligentRoutingSpec.autoScalingSpec."""
    if endpoint.auto_scaling is not None:
        return endpoint.auto_scaling
    return endpoint.routing.auto_scaling_spec if endpoint.routing is not None else None


def name(endpoint: Endpoint) -> str:
    return endpoint.child_name


def _number(value: float | None) -> str:
    """KEDA metadata values are strings; whole numbers without a trailing '.0'."""
    if value is None:
        return "0"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _prometheus(trigger: PrometheusTrigger, index: int) -> Manifest:
    metadata: dict[str, str] = {
        "serverAddress": trigger.server_address or "",
        "query": trigger.query or "",
        "threshold": _number(trigger.target_value),
        "activationThreshold": _number(trigger.activation_target_value),
    }
    if trigger.namespace:
        metadata["namespace"] = trigger.namespace
    if trigger.custom_headers:
        metadata["customHeaders"] = trigger.custom_headers
    amp = _AMP_REGION.match(trigger.server_address or "")
    if amp:
        metadata.update(awsRegion=amp.group(1), identityOwner="operator")
    return _trigger("prometheus", trigger.name or f"prometheus-{index}", trigger.metric_type, trigger, metadata)


def _cloud_watch(trigger: CloudWatchTrigger, index: int, region: str) -> Manifest:
    metadata: dict[str, str] = {
        "namespace": trigger.namespace or "",
        "metricName": trigger.metric_name or "",
        "targetMetricValue": _number(trigger.target_value),
        "activationTargetMetricValue": _number(trigger.activation_target_value),
        "minMetricValue": _number(trigger.min_value),
        "metricStat": trigger.metric_stat,
        "metricStatPeriod": str(trigger.metric_collection_period),
        "metricCollectionTime": str(trigger.metric_collection_start_time),
        "awsRegion": region,
        "identityOwner": "operator",
    }
    if trigger.dimensions:
        metadata["dimensionName"] = ";".join(d.name for d in trigger.dimensions)
        metadata["dimensionValue"] = ";".join(d.value for d in trigger.dimensions)
    return _trigger("aws-cloudwatch", trigger.name or f"cloudwatch-{index}", trigger.metric_type, trigger, metadata)


def _trigger(
    kind: str,
    trigger_name: str,
    metric_type: MetricType,
    trigger: PrometheusTrigger | CloudWatchTrigger,
    meta: Manifest,
) -> Manifest:
    return {
        "type": kind,
        "name": trigger_name,
        "metricType": _METRIC_TYPES[metric_type],
        "useCachedMetrics": trigger.use_cached_metrics,
        "metadata": meta,
    }


def scaled_object(endpoint: Endpoint, spec: AutoScalingSpec, region: str) -> Manifest:
    """The ScaledObject for `endpoint`; `region` is the operator's AWS region, for CloudWatch triggers."""
    triggers = [_prometheus(t, i) for i, t in enumerate(spec.prometheus_triggers())]
    triggers += [_cloud_watch(t, i, region) for i, t in enumerate(spec.cloud_watch_triggers())]
    ref = endpoint.ref
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name(endpoint),
            "namespace": ref.namespace,
            "labels": labels.managed(
                {
                    labels.COMPONENT: "autoscaler",
                    labels.ENDPOINT_LABEL: endpoint.label_value,
                    labels.ENDPOINT_KIND_LABEL: ref.kind.lower(),
                }
            ),
            "ownerReferences": [owners.owner_reference(ref.kind, ref.name, ref.uid, controller=True)],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": ref.parent().api_version, "kind": ref.kind, "name": ref.name},
            "minReplicaCount": spec.min_replica_count,
            "maxReplicaCount": spec.max_replica_count,
            "pollingInterval": spec.polling_interval,
            "cooldownPeriod": spec.cooldown_period,
            "initialCooldownPeriod": spec.initial_cooldown_period,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {"stabilizationWindowSeconds": spec.scale_down_stabilization_time},
                        "scaleUp": {"stabilizationWindowSeconds": spec.scale_up_stabilization_time},
                    },
                }
            },
            "triggers": triggers,
        },
    }


def problems(spec: AutoScalingSpec) -> list[str]:
    """What keeps the settings from making a working ScaledObject, in words a user can act on (empty: none)."""
    found: list[str] = []
    if spec.max_replica_count < spec.min_replica_count:
        found.append(f"maxReplicaCount {spec.max_replica_count} is below minReplicaCount {spec.min_replica_count}")
    if not spec.prometheus_triggers() and not spec.cloud_watch_triggers():
        found.append("no trigger: set prometheusTrigger(List) or cloudWatchTrigger(List)")
    for trigger in spec.prometheus_triggers():
        if not trigger.server_address or not trigger.query or trigger.target_value is None:
            found.append("a prometheus trigger needs serverAddress, query and targetValue")
    for cw in spec.cloud_watch_triggers():
        if not cw.namespace or not cw.metric_name or cw.target_value is None:
            found.append("a CloudWatch trigger needs namespace, metricName and targetValue")
    return found
