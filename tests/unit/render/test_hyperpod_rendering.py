"""What HyperPod's fields do to the rendered children: the kubernetes block, metrics, the load balancer, JumpStart's
accelerators and gated-download role. The manifests are the corpus under tests/hyperpod-corpus/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import golden
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.strategies import RoutingStrategy
from warmstart.placement import accelerator_request
from warmstart.render import deployments, endpoints, monitoring, names, router
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint, JumpStartResolution, ObjectRef

CORPUS = Path(__file__).resolve().parents[2] / "hyperpod-corpus"
GOLDEN = Path(__file__).parent / "golden" / "endpoints"
CONTEXT = RenderContext(operator_image="warmstart:test")
ROLE = "arn:aws:iam::123456789012:role/HyperPodGatedModelDownload"


def corpus(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CORPUS / name).read_text())
    return doc


def iec(name: str) -> Endpoint:
    doc = corpus(name)
    ref = ObjectRef(kind=doc["kind"], name=doc["metadata"]["name"], namespace="team-a", uid="1111-2222")
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(doc["spec"]))


def jsm(name: str, **resolved: Any) -> Endpoint:
    doc = corpus(name)
    ref = ObjectRef(kind=doc["kind"], name=doc["metadata"]["name"], namespace="team-a", uid="3333-4444")
    resolution = JumpStartResolution(
        bucket="jumpstart-private-cache-prod-us-west-2", prefix="llama/", region="us-west-2", image="djl:1", **resolved
    )
    return endpoints.from_jumpstart(ref, JumpStartModelSpec.model_validate(doc["spec"]), resolution)


def pod(endpoint: Endpoint, context: RenderContext = CONTEXT) -> dict[str, Any]:
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    spec: dict[str, Any] = deployments.deployment(endpoint, generation, context)["spec"]["template"]
    return spec


def test_everything_manifest_renders_golden_children() -> None:
    endpoint = iec("iec-v1-s3-everything.yaml")
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    golden.check_manifests(
        GOLDEN,
        "hyperpod-everything",
        [deployments.deployment(endpoint, generation, CONTEXT), *router.manifests(endpoint, CONTEXT)],
    )


def test_kubernetes_block_reaches_the_pods_after_the_preload() -> None:
    endpoint = iec("iec-v1-s3-everything.yaml")
    spec = pod(endpoint)["spec"]
    assert spec["schedulerName"] == "hyperpod-scheduler"
    assert spec["serviceAccountName"] == "inference-sa"
    init = [c["name"] for c in spec["initContainers"]]
    assert init.index(deployments.INIT_CONTAINER) < init.index("check-weights") == len(init) - 1
    assert {"server-config", "scratch"} <= {v["name"] for v in spec["volumes"]}
    (user,) = [c for c in spec["initContainers"] if c["name"] == "check-weights"]
    model_mount = next(m for m in user["volumeMounts"] if m["name"] == "model-weights")
    worker_mount = spec["containers"][0]["volumeMounts"][0]
    assert model_mount == {**worker_mount, "mountPath": "/model"}  # the model files, read-only, never the cache root
    assert model_mount["readOnly"] is True and model_mount["subPath"].startswith("keys/")


def test_metrics_become_scrape_annotations_or_a_pod_monitor() -> None:
    endpoint = iec("iec-v1-s3-everything.yaml")
    template = pod(endpoint)
    annotations = template["metadata"]["annotations"]
    assert annotations[deployments.SCRAPE_ANNOTATION] == "true"
    assert (annotations[deployments.PATH_ANNOTATION], annotations[deployments.PORT_ANNOTATION]) == (
        "/server/metrics",
        "9091",
    )
    assert {"name": "metrics", "containerPort": 9091, "protocol": "TCP"} in template["spec"]["containers"][0]["ports"]

    with_monitors = CONTEXT.model_copy(update={"pod_monitors": True})
    assert deployments.SCRAPE_ANNOTATION not in pod(endpoint, with_monitors)["metadata"]["annotations"]
    monitor = monitoring.pod_monitor(endpoint)
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/server/metrics", "interval": "30s"}]
    assert monitor["spec"]["selector"]["matchLabels"] == deployments.pod_selector(endpoint)


def test_metrics_on_the_invocation_port_use_its_name_and_aws_defaults() -> None:
    endpoint = iec("iec-v1alpha1-s3.yaml")  # modelMetrics.port 8000 = the invocation port
    assert monitoring.pod_monitor(endpoint)["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert len(pod(endpoint)["spec"]["containers"][0]["ports"]) == 1
    defaults = endpoint.model_copy(update={"metrics": endpoint.metrics.model_copy(update={"model_metrics": None})})
    assert deployments.metrics_port(defaults) == ("metrics", 8080, "/metrics")


def test_disabled_metrics_add_nothing() -> None:
    endpoint = jsm("jsm-v1alpha1.yaml")
    assert not endpoint.metrics_enabled
    assert deployments.SCRAPE_ANNOTATION not in pod(endpoint)["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("name", "strategy"),
    [
        ("iec-v1-s3-everything.yaml", RoutingStrategy.LEASTOUTSTANDING),  # loadBalancer alone: its algorithm
        ("iec-v1alpha1-s3.yaml", RoutingStrategy.ROUNDROBIN),
        ("iec-v1-fsx-routing.yaml", RoutingStrategy.PREFIXAWARE),  # intelligentRoutingSpec wins over round_robin
    ],
)
def test_routing_algorithm_is_the_router_strategy_without_intelligent_routing(
    name: str, strategy: RoutingStrategy
) -> None:
    endpoint = iec(name)
    assert endpoint.routing_enabled
    assert router.config(endpoint).strategy is strategy


def test_health_check_path_is_the_readiness_probe_unless_the_worker_has_one() -> None:
    probe = pod(iec("iec-v1alpha1-s3.yaml"))["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"] == {"path": "/health", "port": "http"}
    own = pod(iec("iec-v1-s3-everything.yaml"))["spec"]["containers"][0]["readinessProbe"]
    assert own["initialDelaySeconds"] == 10  # the worker's probe, untouched


def test_child_names_are_dns_labels_whatever_the_object_name() -> None:
    endpoint = iec("iec-v1-s3-everything.yaml")  # named llama-3.1-8b-instruct, modelName Llama-3.1-8B-Instruct
    assert names.is_dns1035(endpoint.child_name) and "." not in endpoint.child_name
    assert names.is_dns1035(router.name(endpoint.ref.name))
    assert names.is_label_value(endpoint.label_value)


def test_mig_partition_is_the_resource_request_and_one_gpu_for_the_server() -> None:
    endpoint = jsm("jsm-v1-everything.yaml", gated=True, env={"SM_NUM_GPUS": "8"})
    worker = pod(endpoint)["spec"]["containers"][0]
    assert worker["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": 1}, "requests": {"nvidia.com/mig-1g.10gb": 1}}
    assert {"name": "SM_NUM_GPUS", "value": "1"} in worker["env"]


@pytest.mark.parametrize(
    ("resolved", "gpus"),
    [
        ({}, 4),  # ml.g5.12xlarge has 4
        ({"accelerators": 2}, 2),  # the JumpStart spec's resource requirements
        ({"accelerators": 2, "env": {"SM_NUM_GPUS": "1"}}, 1),  # what the server is told to use
    ],
)
def test_jumpstart_pods_request_the_gpus_the_spec_or_instance_type_implies(resolved: dict[str, Any], gpus: int) -> None:
    worker = pod(jsm("jsm-v1alpha1.yaml", **resolved))["spec"]["containers"][0]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}


def test_gated_download_role_reaches_the_preload_only_for_gated_models() -> None:
    gated = jsm("jsm-v1alpha1.yaml", gated=True)
    assert gated.source.s3_storage is not None and gated.source.s3_storage.role_arn == ROLE
    preload = next(c for c in pod(gated)["spec"]["initContainers"] if c["name"] == deployments.INIT_CONTAINER)
    assert ROLE in " ".join(preload["args"])
    public = jsm("jsm-v1alpha1.yaml", gated=False)
    assert public.source.s3_storage is not None and public.source.s3_storage.role_arn is None
    assert gated.weights_key({}) == public.weights_key({})  # the same bytes: one cache, whoever reads it


def test_accelerator_table() -> None:
    assert accelerator_request("ml.p5.48xlarge") == {"nvidia.com/gpu": 8}
    assert accelerator_request("ml.trn1.32xlarge") == {"aws.amazon.com/neuron": 16}
    assert accelerator_request("ml.c5.xlarge") == {}
    assert accelerator_request("ml.c5.xlarge", 2) == {"nvidia.com/gpu": 2}
