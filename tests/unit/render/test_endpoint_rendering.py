"""Endpoint rendering: the seed example's Deployment, Service, caches match golden files; keys and affinity behave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import golden
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.render import caches, deployments, endpoints, router, services
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import JumpStartResolution, ObjectRef

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden" / "endpoints"
REF = ObjectRef(kind="InferenceEndpointConfig", name="example-model", namespace="team-a", uid="1111-2222", generation=3)
CONTEXT = RenderContext(operator_image="warmstart:test")


def seed_spec(**changes: Any) -> InferenceEndpointConfigSpec:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())
    doc["spec"].update(changes)
    return InferenceEndpointConfigSpec.model_validate(doc["spec"])


def check_golden(name: str, manifests: list[dict[str, Any]]) -> None:
    golden.check_manifests(GOLDEN, name, manifests)


def test_seed_renders_golden_children() -> None:
    endpoint = endpoints.from_iec(REF, seed_spec())
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    check_golden(
        "seed",
        [
            caches.weights_cache(endpoint, CONTEXT),
            caches.image_cache(endpoint),
            deployments.deployment(endpoint, generation, CONTEXT),
            services.client_service(endpoint, via_router=False),
        ],
    )


def test_router_objects_golden() -> None:
    endpoint = endpoints.from_iec(
        REF, seed_spec(intelligentRoutingSpec={"enabled": True, "routingStrategy": "prefixaware"})
    )
    check_golden("router", router.manifests(endpoint, CONTEXT, sync_key="0123456789abcdef" * 4))


def test_router_pods_go_where_the_chart_puts_them() -> None:
    endpoint = endpoints.from_iec(REF, seed_spec(intelligentRoutingSpec={"enabled": True}))
    placed = CONTEXT.model_copy(update={"router_node_selector": {"role": "cpu"}})
    assert router.deployment(endpoint, placed)["spec"]["template"]["spec"]["nodeSelector"] == {"role": "cpu"}
    assert "nodeSelector" not in router.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("spelling", "served"), [("prefix_aware", "prefixaware"), ("least_outstanding_requests", "leastoutstanding")]
)
def test_router_configmap_names_the_strategy_in_its_one_spelling(spelling: str, served: str) -> None:
    endpoint = endpoints.from_iec(REF, seed_spec(intelligentRoutingSpec={"enabled": True, "routingStrategy": spelling}))
    assert yaml.safe_load(router.configmap(endpoint)["data"]["router.yaml"]) == {"strategy": served}


def test_request_limits_reach_the_router_and_its_admin_port_stays_off_the_service() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    doc["intelligentRoutingSpec"] = {"enabled": True, "routingStrategy": "prefixaware"}
    doc["worker"]["requestLimits"] = {"maxConcurrentRequests": 8, "maxQueueSize": 16, "overflowStatusCode": 503}
    endpoint = endpoints.from_iec(REF, InferenceEndpointConfigSpec.model_validate(doc))
    knobs = yaml.safe_load(router.configmap(endpoint)["data"]["router.yaml"])
    assert knobs == {
        "strategy": "prefixaware",
        "maxConcurrentRequests": 8,
        "maxQueueSize": 16,
        "overflowStatusCode": 503,
    }
    container = router.deployment(endpoint, CONTEXT)["spec"]["template"]["spec"]["containers"][0]
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == {
        "http": 8080,
        "admin": 9090,
        "sync": 9091,
    }
    assert [port["targetPort"] for port in services.client_service(endpoint, via_router=True)["spec"]["ports"]] == [
        8080
    ]


def test_kvaware_in_any_spelling_is_named_unsupported() -> None:
    from warmstart.render.unsupported import unsupported_fields

    for spelling in ("kvaware", "kv_aware"):
        spec = seed_spec(intelligentRoutingSpec={"enabled": True, "routingStrategy": spelling})
        assert "spec.intelligentRoutingSpec.routingStrategy=kvaware (served as prefixaware)" in unsupported_fields(spec)


def test_same_source_same_key_other_source_new_key() -> None:
    a = endpoints.from_iec(REF, seed_spec())
    b = endpoints.from_iec(
        REF.model_copy(update={"name": "other", "uid": "3333"}), seed_spec(modelName="other", replicas=4)
    )
    assert a.weights_key({}) == b.weights_key({}) and a.image_key() == b.image_key()
    moved = seed_spec(
        modelSourceConfig={
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
            "modelLocation": "models/v2",
        }
    )
    assert endpoints.from_iec(REF, moved).weights_key({}) != a.weights_key({})


def test_affinity_prefers_warm_weights_over_warm_image_and_requires_only_the_instance_types() -> None:
    spec = seed_spec(instanceType=None, instanceTypes=["ml.p5.48xlarge", "ml.g5.24xlarge"])
    endpoint = endpoints.from_iec(REF, spec)
    affinity = deployments.affinity(endpoint, Generation("wkey", "ikey"))["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert required["values"] == ["ml.p5.48xlarge", "ml.g5.24xlarge"]
    weights = [
        (
            t["preference"]["matchExpressions"][0]["key"],
            t["preference"]["matchExpressions"][0]["values"][0],
            t["weight"],
        )
        for t in affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    ]
    assert weights[0] == ("cache.inference.sagemaker.aws.amazon.com/weights-wkey", "ready", 100)
    assert weights[1] == ("cache.inference.sagemaker.aws.amazon.com/image-ikey", "ready", 30)
    assert weights[2][1:] == ("ml.p5.48xlarge", 10) and weights[3][1:] == ("ml.g5.24xlarge", 9)


def test_cache_disabled_uses_empty_dir_and_still_preloads_in_the_init_container() -> None:
    endpoint = endpoints.from_iec(REF, seed_spec(modelCacheConfig=None))
    manifest = deployments.deployment(endpoint, Generation(endpoint.weights_key({}), endpoint.image_key()), CONTEXT)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "model-weights", "emptyDir": {}}
    init = pod["initContainers"][0]
    assert init["args"][0] == "preload" and "--if-missing" in init["args"]
    assert {"name": "model-weights", "mountPath": "/opt/dlami/nvme/warmstart"} in init["volumeMounts"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["nodeAffinity"]


def test_rollout_never_drops_capacity() -> None:
    endpoint = endpoints.from_iec(REF, seed_spec())
    manifest = deployments.deployment(endpoint, Generation("a", "b"), CONTEXT)
    assert manifest["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_jumpstart_follows_the_same_pipeline() -> None:
    spec = JumpStartModelSpec.model_validate(
        {
            "model": {"modelId": "meta-textgeneration-llama-3-1-8b", "acceptEula": True},
            "server": {"instanceType": "ml.g5.12xlarge"},
            "modelCacheConfig": {"weightsCache": {"enabled": True}},
        }
    )
    resolution = JumpStartResolution(
        bucket="jumpstart-cache-prod-us-west-2",
        prefix="meta/llama/",
        region="us-west-2",
        image="tgi:2",
        env={"SM_NUM_GPUS": "4"},
    )
    endpoint = endpoints.from_jumpstart(REF.model_copy(update={"kind": "JumpStartModel"}), spec, resolution)
    assert (
        endpoint.source.s3_storage is not None
        and endpoint.source.s3_storage.bucket_name == "jumpstart-cache-prod-us-west-2"
    )
    assert endpoint.worker.image == "tgi:2" and endpoint.instance_types == ["ml.g5.12xlarge"]
    env = {e.name: e.value for e in endpoint.worker.environment_variables or []}
    assert env == {"SM_NUM_GPUS": "4"}
    assert caches.weights_cache(endpoint, CONTEXT)["spec"]["modelSourceConfig"]["modelLocation"] == "meta/llama/"


@pytest.mark.parametrize("field", ["tlsConfig", "kvCacheSpec", "pdSpec", "dataCapture"])
def test_unsupported_fields_are_named(field: str) -> None:
    from warmstart.render.unsupported import unsupported_fields

    spec = seed_spec(
        **{
            field: {"enableL1Cache": True}
            if field == "kvCacheSpec"
            else {"x": 1}
            if field != "tlsConfig"
            else {"tlsCertificateOutputS3Uri": "s3://b/c"}
        }
    )
    assert f"spec.{field}" in unsupported_fields(spec)
