"""Cache access `csi`: no pod warmstart renders into a tenant's namespace carries a hostPath or runs a root step.

Model pods get the driver's read-only volume of their key and no warmstart init container; preload and cleanup Jobs
get its writable volume; every container warmstart adds is non-root without capabilities.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import cache_volumes, deployments, endpoints, jobs, keys
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

CONTEXT = RenderContext(operator_image="warmstart:test", cache_access="csi", job_signing_key="k" * 32)
ROOT = "/mnt/nvme0"
SOURCES: dict[str, dict[str, Any]] = {
    "s3": {"modelSourceType": "s3", "s3Storage": {"bucketName": "bucket", "region": "us-west-2"}, "modelLocation": "m"},
    "huggingface": {
        "modelSourceType": "huggingface",
        "huggingFaceModel": {"modelId": "org/model", "tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    },
    "fsx": {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}, "modelLocation": "m"},
    "pvc": {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "models"}, "modelLocation": "m"},
}


def model_pod(source: dict[str, Any], *, init_containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelName": "m",
        "modelSourceConfig": source,
        "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": ROOT}},
        "instanceType": "ml.g5.24xlarge",
        "worker": {
            "image": "vllm/vllm-openai:latest",
            "modelInvocationPort": {"containerPort": 8000},
            "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    }
    if init_containers:
        spec["kubernetes"] = {"initContainers": init_containers}
    ref = ObjectRef(kind="InferenceEndpointConfig", name="m", namespace="ns", uid="u")
    endpoint = endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    pod: dict[str, Any] = deployments.deployment(endpoint, generation, CONTEXT)["spec"]["template"]["spec"]
    return pod


def job_pods(source: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    spec = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": source, "hostPath": ROOT})
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, "ns", {})
    owner = jobs.Owner(name=keys.weights_cache_name(key), namespace="ns", uid="mdcc")
    request = jobs.PreloadRequest(owner=owner, key=key, node="n1", attempt=1, generation=1)
    preload = jobs.preload_job(request, spec, CONTEXT, [64])["spec"]["template"]["spec"]
    cleanup = jobs.cleanup_job(owner, key, "n1", spec, CONTEXT)["spec"]["template"]["spec"]
    return preload, cleanup, key


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod.get("initContainers") or []) + list(pod["containers"])


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_no_pod_has_a_host_path_or_a_root_step(source: str) -> None:
    preload, cleanup, _ = job_pods(SOURCES[source])
    for pod in (model_pod(SOURCES[source]), preload, cleanup):
        assert [v["name"] for v in pod["volumes"] if "hostPath" in v] == []
        for container in containers(pod):
            assert container["name"] != "warmstart-cache-owner"
            if container["name"] != "worker":  # the model server runs as its image says
                assert container["securityContext"]["runAsNonRoot"] is True
                assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_model_pod_mounts_its_key_read_only_through_the_driver_and_runs_no_warmstart_init_container() -> None:
    pod = model_pod(SOURCES["s3"])
    (volume,) = pod["volumes"]
    key = volume["csi"]["volumeAttributes"]["key"]
    assert volume == cache_volumes.csi_volume("model-weights", key, write=False)
    assert volume["csi"]["readOnly"] is True and volume["csi"]["driver"] == cache_volumes.DRIVER
    assert "initContainers" not in pod
    (server,) = pod["containers"]
    assert server["volumeMounts"] == [{"name": "model-weights", "mountPath": "/opt/ml/model", "readOnly": True}]


def test_a_users_init_container_sees_the_model_read_only_without_a_sub_path() -> None:
    mounts = [{"name": "model-weights", "mountPath": "/models"}]
    pod = model_pod(SOURCES["s3"], init_containers=[{"name": "check", "image": "busybox", "volumeMounts": mounts}])
    (check,) = pod["initContainers"]
    assert check["volumeMounts"] == [{"name": "model-weights", "mountPath": "/models", "readOnly": True}]


def test_preload_and_cleanup_jobs_ask_the_driver_to_write_their_key_and_mount_only_its_tree() -> None:
    preload, cleanup, key = job_pods(SOURCES["s3"])
    for pod in (preload, cleanup):
        cache = next(v for v in pod["volumes"] if v["name"] == jobs.CACHE_VOLUME)
        assert cache == cache_volumes.csi_volume(jobs.CACHE_VOLUME, key, write=True)
        assert "initContainers" not in pod or pod["initContainers"] == []
        (container,) = pod["containers"]
        assert {"name": jobs.CACHE_VOLUME, "mountPath": f"{ROOT}/warmstart/keys/{key}"} in container["volumeMounts"]


def test_csi_access_without_a_signing_key_is_refused() -> None:
    with pytest.raises(ValidationError, match="signing key"):
        RenderContext(cache_access="csi")


def test_csi_access_with_a_short_signing_key_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"at least 32 characters.*it has 31"):
        RenderContext(cache_access="csi", job_signing_key="k" * 31)
