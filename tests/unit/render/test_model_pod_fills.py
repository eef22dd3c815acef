"""A cold node a model pod's own preload filled is read only from a pod that ran exactly the operator's init container.

Every field a tenant could change in a pod of its own to claim a node warm is tried: another key, another source
endpoint in the environment, another command, the cache volume pointed elsewhere, a failed or foreign result.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import deployments, endpoints, model_pod_fills
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

CONTEXT = RenderContext(operator_image="warmstart:test", cache_access="hostPath")
SOURCE = {"modelSourceType": "s3", "s3Storage": {"bucketName": "bucket", "region": "us-west-2"}, "modelLocation": "m"}
DOWNLOADED = {"outcome": "Succeeded", "reason": "Downloaded", "message": "ok", "bytes": 4096, "seconds": 1.0}


def _endpoint() -> tuple[endpoints.Endpoint, Generation]:
    spec = {
        "modelName": "m",
        "modelSourceConfig": SOURCE,
        "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": "/opt/dlami/nvme"}},
        "instanceType": "ml.g5.24xlarge",
        "worker": {
            "image": "vllm/vllm-openai:latest",
            "modelInvocationPort": {"containerPort": 8000},
            "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    }
    ref = ObjectRef(kind="InferenceEndpointConfig", name="m", namespace="ns", uid="u")
    endpoint = endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))
    return endpoint, Generation(endpoint.weights_key({}), endpoint.image_key())


ENDPOINT, GENERATION = _endpoint()
EXPECTED = deployments.preload_init_container(ENDPOINT, GENERATION, CONTEXT)
TEMPLATE = deployments.deployment(ENDPOINT, GENERATION, CONTEXT)["spec"]["template"]["spec"]


def pod(result: dict[str, Any] | None = None, exit_code: int = 0) -> dict[str, Any]:
    """The ReplicaSet's pod of the endpoint's Deployment, scheduled on gpu-7, its preload init container ended."""
    template = deployments.deployment(ENDPOINT, GENERATION, CONTEXT)["spec"]["template"]
    spec = {**copy.deepcopy(template["spec"]), "nodeName": "gpu-7"}
    message = json.dumps(result or DOWNLOADED)
    terminated = {"exitCode": exit_code, "message": message, "reason": "Completed"}
    statuses = [{"name": c["name"], "state": {"terminated": terminated}} for c in spec["initContainers"]]
    return {"metadata": {"name": "m-abc12"}, "spec": spec, "status": {"initContainerStatuses": statuses}}


def _preload(found: dict[str, Any]) -> dict[str, Any]:
    init: dict[str, Any] = next(c for c in found["spec"]["initContainers"] if c["name"] == deployments.INIT_CONTAINER)
    return init


def test_the_operators_own_init_container_that_filled_the_node_is_read() -> None:
    fill = model_pod_fills.fill_of(pod(), TEMPLATE, EXPECTED)
    assert fill == model_pod_fills.Fill(pod="m-abc12", node="gpu-7", reason="Downloaded", bytes=4096)
    warm = {**DOWNLOADED, "reason": "AlreadyPresent"}
    assert model_pod_fills.fill_of(pod(warm), TEMPLATE, EXPECTED) is not None


def test_what_eks_identity_webhooks_add_is_tolerated() -> None:
    found = pod()
    token = {"name": "aws-iam-token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    found["spec"]["volumes"].append(token)
    preload = _preload(found)
    preload["env"] = [*(preload.get("env") or []), {"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::1:role/r"}]
    preload["volumeMounts"].append({"name": "aws-iam-token", "mountPath": "/var/run/secrets/eks", "readOnly": True})
    assert model_pod_fills.fill_of(found, TEMPLATE, EXPECTED) is not None


def _other_key(found: dict[str, Any]) -> None:
    args = _preload(found)["args"]
    args[args.index("--key") + 1] = "0" * 32


def _mirror(found: dict[str, Any]) -> None:
    preload = _preload(found)
    preload["env"] = [*(preload.get("env") or []), {"name": "AWS_ENDPOINT_URL_S3", "value": "http://mirror"}]


def _command(found: dict[str, Any]) -> None:
    _preload(found)["command"] = ["sh", "-c", 'echo \'{"reason": "Downloaded"}\' > /dev/termination-log']


def _volume_elsewhere(found: dict[str, Any]) -> None:
    name = _preload(found)["volumeMounts"][0]["name"]
    volume = next(v for v in found["spec"]["volumes"] if v["name"] == name)
    volume["hostPath"] = {"path": "/tmp/fake", "type": "Directory"}


@pytest.mark.parametrize("change", [_other_key, _mirror, _command, _volume_elsewhere])
def test_a_pod_that_runs_anything_else_is_never_read(change: Any) -> None:
    found = pod()
    change(found)
    assert model_pod_fills.fill_of(found, TEMPLATE, EXPECTED) is None


def test_a_failed_or_unfinished_preload_or_an_unscheduled_pod_fills_nothing() -> None:
    assert model_pod_fills.fill_of(pod(exit_code=1), TEMPLATE, EXPECTED) is None
    assert model_pod_fills.fill_of(pod({**DOWNLOADED, "reason": "AccessDenied"}), TEMPLATE, EXPECTED) is None
    running = pod()
    running["status"]["initContainerStatuses"] = [{"name": deployments.INIT_CONTAINER, "state": {"running": {}}}]
    assert model_pod_fills.fill_of(running, TEMPLATE, EXPECTED) is None
    unscheduled = pod()
    del unscheduled["spec"]["nodeName"]
    assert model_pod_fills.fill_of(unscheduled, TEMPLATE, EXPECTED) is None


def _stored(template: dict[str, Any]) -> dict[str, Any]:
    """The template as the API server stores it: container fields and volume modes filled in with their defaults."""
    stored = copy.deepcopy(template)
    for container in stored["initContainers"] + stored["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("resources", {})
        for entry in container.get("env") or []:
            field = (entry.get("valueFrom") or {}).get("fieldRef")
            if field is not None:
                field.setdefault("apiVersion", "v1")
    return stored


def test_the_api_servers_defaults_on_the_stored_template_and_its_pods_are_not_a_difference() -> None:
    stored = _stored(TEMPLATE)
    found = pod()
    found["spec"] = {**copy.deepcopy(stored), "nodeName": "gpu-7"}
    assert model_pod_fills.fill_of(found, stored, EXPECTED) is not None


def test_an_edited_deployment_is_not_trusted_even_when_its_pod_runs_it() -> None:
    stored = _stored(TEMPLATE)
    preload = next(c for c in stored["initContainers"] if c["name"] == deployments.INIT_CONTAINER)
    preload["envFrom"] = [{"configMapRef": {"name": "tenant-mirror"}}]  # e.g. an HF_ENDPOINT of the tenant's choice
    found = pod()
    found["spec"] = {**copy.deepcopy(stored), "nodeName": "gpu-7"}
    assert model_pod_fills.fill_of(found, stored, EXPECTED) is None
