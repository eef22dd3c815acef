"""autoScalingSpec renders a KEDA ScaledObject on the endpoint's scale subresource, with HyperPod's trigger fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import golden
from warmstart.api.autoscaling import AutoScalingSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import autoscaling, endpoints
from warmstart.render.endpoints import ObjectRef

GOLDEN = Path(__file__).parent / "golden" / "autoscaling"
REF = ObjectRef(kind="InferenceEndpointConfig", name="llama", namespace="team-a", uid="uid-1", generation=2)
AMP = "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-0123abcd-4567"
QUEUE = "sum(warmstart_router_queue_depth{namespace='team-a'})"


def _spec(**extra: Any) -> InferenceEndpointConfigSpec:
    return InferenceEndpointConfigSpec.model_validate(
        {
            "modelName": "llama",
            "instanceType": "ml.g5.8xlarge",
            "modelSourceConfig": {
                "modelSourceType": "s3",
                "s3Storage": {"bucketName": "models", "region": "us-west-2"},
            },
            "worker": {
                "image": "vllm/vllm-openai:v0.8.0",
                "modelInvocationPort": {"containerPort": 8000},
                "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
                "resources": {},
            },
            **extra,
        }
    )


def _rendered(auto: dict[str, Any], **extra: Any) -> dict[str, Any]:
    endpoint = endpoints.from_iec(REF, _spec(autoScalingSpec=auto, **extra))
    spec = autoscaling.spec_of(endpoint)
    assert spec is not None
    return autoscaling.scaled_object(endpoint, spec, "us-east-2")


def test_prometheus_and_cloudwatch_triggers_match_golden() -> None:
    auto = {
        "minReplicaCount": 0,
        "maxReplicaCount": 8,
        "pollingInterval": 15,
        "cooldownPeriod": 120,
        "initialCooldownPeriod": 60,
        "scaleDownStabilizationTime": 200,
        "scaleUpStabilizationTime": 5,
        "prometheusTrigger": {
            "name": "queue",
            "serverAddress": "http://prometheus.monitoring:9090",
            "query": QUEUE,
            "targetValue": 4,
            "activationTargetValue": 0.5,
            "metricType": "Value",
            "namespace": "team-a",
            "customHeaders": "X-Scope-OrgID=team-a",
            "useCachedMetrics": False,
        },
        "cloudWatchTrigger": {
            "name": "invocations",
            "namespace": "AWS/SageMaker",
            "metricName": "Invocations",
            "dimensions": [{"name": "EndpointName", "value": "llama"}, {"name": "VariantName", "value": "all"}],
            "targetValue": 100,
            "minValue": 1,
            "metricStat": "Sum",
            "metricCollectionPeriod": 60,
            "metricCollectionStartTime": 600,
        },
    }
    golden.check_manifests(GOLDEN, "prometheus-and-cloudwatch", [_rendered(auto)])


def test_it_scales_the_endpoint_itself_through_its_scale_subresource() -> None:
    manifest = _rendered({"prometheusTrigger": {"serverAddress": AMP, "query": QUEUE, "targetValue": 2}})
    assert manifest["apiVersion"] == "keda.sh/v1alpha1" and manifest["kind"] == "ScaledObject"
    assert manifest["spec"]["scaleTargetRef"] == {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1",
        "kind": "InferenceEndpointConfig",
        "name": "llama",
    }
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1" and owner["controller"] is True


def test_aws_defaults_apply_when_only_a_trigger_is_given() -> None:
    spec = _rendered({"prometheusTrigger": {"serverAddress": AMP, "query": QUEUE, "targetValue": 2}})["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 5)
    assert (spec["pollingInterval"], spec["cooldownPeriod"], spec["initialCooldownPeriod"]) == (30, 300, 300)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == {"scaleDown": {"stabilizationWindowSeconds": 300}, "scaleUp": {"stabilizationWindowSeconds": 0}}
    (trigger,) = spec["triggers"]
    assert trigger["metricType"] == "AverageValue" and trigger["useCachedMetrics"] is True


def test_an_amp_workspace_is_queried_with_sigv4_as_kedas_own_identity() -> None:
    (trigger,) = _rendered({"prometheusTrigger": {"serverAddress": AMP, "query": QUEUE, "targetValue": 2}})["spec"][
        "triggers"
    ]
    assert trigger["metadata"]["awsRegion"] == "eu-west-1"
    assert trigger["metadata"]["identityOwner"] == "operator"


def test_the_plural_lists_take_priority_over_the_singular_triggers() -> None:
    auto = {
        "prometheusTrigger": {"name": "single", "serverAddress": AMP, "query": "a", "targetValue": 1},
        "prometheusTriggerList": [
            {"name": "first", "serverAddress": AMP, "query": "b", "targetValue": 1},
            {"name": "second", "serverAddress": AMP, "query": "c", "targetValue": 1},
        ],
        "cloudWatchTrigger": {"name": "cw-single", "namespace": "N", "metricName": "M", "targetValue": 1},
        "cloudWatchTriggerList": [{"name": "cw-listed", "namespace": "N", "metricName": "M", "targetValue": 1}],
    }
    names = [t["name"] for t in _rendered(auto)["spec"]["triggers"]]
    assert names == ["first", "second", "cw-listed"]


def test_cloudwatch_queries_in_the_operators_region() -> None:
    auto = {"cloudWatchTrigger": {"namespace": "AWS/SageMaker", "metricName": "Invocations", "targetValue": 10}}
    (trigger,) = _rendered(auto)["spec"]["triggers"]
    assert trigger["type"] == "aws-cloudwatch" and trigger["metadata"]["awsRegion"] == "us-east-2"
    assert trigger["name"] == "cloudwatch-0"


def test_the_routing_block_autoscaling_is_used_when_the_top_level_one_is_absent() -> None:
    routing = {
        "enabled": True,
        "autoScalingSpec": {
            "maxReplicaCount": 3,
            "prometheusTrigger": {"serverAddress": AMP, "query": "q", "targetValue": 1},
        },
    }
    endpoint = endpoints.from_iec(REF, _spec(intelligentRoutingSpec=routing))
    spec = autoscaling.spec_of(endpoint)
    assert spec is not None and spec.max_replica_count == 3


@pytest.mark.parametrize(
    ("auto", "problem"),
    [
        ({}, "no trigger"),
        (
            {
                "minReplicaCount": 4,
                "maxReplicaCount": 2,
                "cloudWatchTrigger": {"namespace": "N", "metricName": "M", "targetValue": 1},
            },
            "below",
        ),
        ({"prometheusTrigger": {"serverAddress": AMP, "targetValue": 1}}, "needs serverAddress, query"),
        ({"cloudWatchTrigger": {"namespace": "N", "targetValue": 1}}, "needs namespace, metricName"),
    ],
)
def test_settings_that_cannot_work_are_named(auto: dict[str, Any], problem: str) -> None:
    assert any(problem in p for p in autoscaling.problems(AutoScalingSpec.model_validate(auto)))


def test_a_usable_spec_has_no_problems() -> None:
    spec = AutoScalingSpec.model_validate({"prometheusTrigger": {"serverAddress": AMP, "query": "q", "targetValue": 1}})
    assert autoscaling.problems(spec) == []


@pytest.mark.parametrize("address", ["ftp://prometheus:9090", "prometheus:9090", "https://x y"])
def test_server_addresses_that_are_not_urls_are_refused(address: str) -> None:
    with pytest.raises(ValidationError):
        AutoScalingSpec.model_validate({"prometheusTrigger": {"serverAddress": address}})
