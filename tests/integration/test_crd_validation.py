"""Bad manifests are rejected at `kubectl apply` by the real API server, each with a message a user can act on."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

import kube

pytestmark = pytest.mark.cluster

Mutation = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


def _set(path: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        node = doc
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        node = doc
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        del node[leaf]

    return mutate


def _both(*mutations: Mutation) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        for m in mutations:
            m(doc)

    return mutate


HF = {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": "org/model", "commitSHA": "abc123"}}

CASES: list[tuple[str, Mutation, str]] = [
    ("instanceType+instanceTypes", _set("spec.instanceTypes", ["ml.g5.xlarge"]), "mutually exclusive"),
    (
        "instanceType+nodeAffinity",
        _set("spec.nodeAffinity", {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}),
        "instanceType, instanceTypes and nodeAffinity are mutually exclusive",
    ),
    ("s3 without s3Storage", _drop("spec.modelSourceConfig.s3Storage"), "modelSourceType s3 requires s3Storage"),
    (
        "fsx without fsxStorage",
        _set("spec.modelSourceConfig.modelSourceType", "fsx"),
        "modelSourceType fsx requires fsxStorage",
    ),
    (
        "huggingface without huggingFaceModel",
        _set("spec.modelSourceConfig.modelSourceType", "huggingface"),
        "modelSourceType huggingface requires huggingFaceModel",
    ),
    (
        "kubernetesVolume without kubernetesVolume",
        _set("spec.modelSourceConfig.modelSourceType", "kubernetesVolume"),
        "modelSourceType kubernetesVolume requires kubernetesVolume",
    ),
    (
        "short commitSHA",
        _set("spec.modelSourceConfig", HF),
        "commitSHA must be a full 40-character lowercase hex git commit SHA",
    ),
    (
        "modelLocation with ..",
        _set("spec.modelSourceConfig.modelLocation", "models/../secrets"),
        "modelLocation must not contain a '..' path segment",
    ),
    (
        "absolute modelLocation",
        _set("spec.modelSourceConfig.modelLocation", "/etc/passwd"),
        "modelLocation must be relative to the source",
    ),
    (
        "relative hostPath",
        _set("spec.modelCacheConfig.weightsCache.hostPath", "opt/nvme"),
        "hostPath must be an absolute path",
    ),
    (
        "hostPath with ..",
        _set("spec.modelCacheConfig.weightsCache.hostPath", "/opt/../etc"),
        "hostPath must not contain a '..' path segment",
    ),
    (
        "replicas beyond int32",
        _set("spec.replicas", 2**31),
        "spec.replicas in body should be less than or equal to 2147483647",
    ),
    ("modelName with a leading dash", _set("spec.modelName", "-llama"), "spec.modelName: Invalid value"),
    ("instanceType without ml.", _set("spec.instanceType", "g5.24xlarge"), "spec.instanceType: Invalid value"),
    ("modelName too long", _set("spec.modelName", "m" * 64), "spec.modelName: Too long"),
    (
        "unknown routing strategy",
        _set("spec.intelligentRoutingSpec", {"enabled": True, "routingStrategy": "fastest"}),
        'Unsupported value: "fastest"',
    ),
    (
        "port above 65535",
        _set("spec.worker.modelInvocationPort.containerPort", 70000),
        "should be less than or equal to 65535",
    ),
    ("port zero", _set("spec.worker.modelInvocationPort.containerPort", 0), "should be greater than or equal to 1"),
    ("missing worker", _drop("spec.worker"), "spec.worker: Required value"),
    ("missing modelName", _drop("spec.modelName"), "spec.modelName: Required value"),
    ("unknown source type", _set("spec.modelSourceConfig.modelSourceType", "ftp"), 'Unsupported value: "ftp"'),
    ("negative replicas", _set("spec.replicas", -1), "spec.replicas: Invalid value: -1"),
    (
        "bad bucket name",
        _set("spec.modelSourceConfig.s3Storage.bucketName", "Example_Bucket"),
        "spec.modelSourceConfig.s3Storage.bucketName",
    ),
    (
        "bad FSx id",
        _set("spec.modelSourceConfig", {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "lustre-1"}}),
        "spec.modelSourceConfig.fsxStorage.fileSystemId",
    ),
    (
        "relative mountPath",
        _set("spec.worker.modelVolumeMount.mountPath", "opt/ml/model"),
        "mountPath must be an absolute path",
    ),
    (
        "env var with a space",
        _set("spec.worker.environmentVariables", [{"name": "BAD NAME", "value": "x"}]),
        "environmentVariables[0].name",
    ),
    ("replicas as a string", _set("spec.replicas", "two"), 'spec.replicas: Invalid value: "string"'),
    (
        "weightsCache.enabled not a boolean",
        _set("spec.modelCacheConfig.weightsCache.enabled", "yes"),
        'spec.modelCacheConfig.weightsCache.enabled: Invalid value: "string"',
    ),
]


@pytest.mark.parametrize(("case", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_endpoint_is_rejected_with_a_clear_message(
    cluster: Any, namespace: str, case: str, mutate: Mutation, message: str
) -> None:
    doc = copy.deepcopy(kube.seed_manifest())
    doc["metadata"]["namespace"] = namespace
    mutate(doc)
    result = kube.apply(cluster.kubeconfig, doc, check=False)
    assert result.returncode != 0, f"{case}: accepted but should be rejected"
    assert message in result.stderr, f"{case}: {result.stderr}"
    assert kube.get(cluster.kubeconfig, "iec", doc["metadata"]["name"], namespace) is None


JUMPSTART = {
    "apiVersion": "inference.sagemaker.aws.amazon.com/v1",
    "kind": "JumpStartModel",
    "metadata": {"name": "js"},
    "spec": {
        "model": {"modelId": "meta-textgeneration-llama-3-1-8b", "acceptEula": True},
        "server": {"instanceType": "ml.g5.12xlarge"},
    },
}


@pytest.mark.parametrize("model_name", ["Llama-3.1-8B-Instruct", "Qwen3_0.6B", "m" * 63])
def test_model_names_hyperpod_accepts_are_accepted(cluster: Any, namespace: str, model_name: str) -> None:
    doc = copy.deepcopy(kube.seed_manifest())
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["modelName"] = model_name
    result = kube.apply(cluster.kubeconfig, doc, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.server.instanceType", "g5.12xlarge", "spec.server.instanceType: Invalid value"),
        ("spec.server.acceleratorPartitionType", "1g.10gb", "spec.server.acceleratorPartitionType: Invalid value"),
        ("spec.model.gatedModelDownloadRole", "arn:aws:iam::1:role/x", "spec.model.gatedModelDownloadRole"),
        ("spec.model.modelId", "llama_3", "spec.model.modelId: Invalid value"),
    ],
)
def test_jumpstart_fields_are_checked_as_hyperpod_checks_them(
    cluster: Any, namespace: str, path: str, value: str, message: str
) -> None:
    doc = copy.deepcopy(JUMPSTART)
    _set(path, value)(doc)
    result = kube.apply(cluster.kubeconfig, doc, namespace, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_accept_eula_must_be_a_boolean(cluster: Any, namespace: str) -> None:
    doc = copy.deepcopy(JUMPSTART)
    doc["spec"]["model"]["acceptEula"] = "yes"
    result = kube.apply(cluster.kubeconfig, doc, namespace, check=False)
    assert result.returncode != 0
    assert 'spec.model.acceptEula: Invalid value: "string"' in result.stderr


def test_jumpstart_requires_model_id(cluster: Any, namespace: str) -> None:
    doc = copy.deepcopy(JUMPSTART)
    del doc["spec"]["model"]["modelId"]
    result = kube.apply(cluster.kubeconfig, doc, namespace, check=False)
    assert "spec.model.modelId: Required value" in result.stderr


def test_image_cache_requires_an_image(cluster: Any, namespace: str) -> None:
    doc = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1",
        "kind": "ModelImageCache",
        "metadata": {"name": "mic"},
        "spec": {},
    }
    result = kube.apply(cluster.kubeconfig, doc, namespace, check=False)
    assert "spec.image: Required value" in result.stderr


def test_the_seed_manifest_is_accepted_verbatim(cluster: Any, namespace: str) -> None:
    text = (
        (kube.ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml")
        .read_text()
        .replace("namespace: default", f"namespace: {namespace}")
    )
    kube.apply(cluster.kubeconfig, text)
    stored = kube.get(cluster.kubeconfig, "iec", "example-model", namespace)
    assert stored is not None
    assert stored["spec"]["instanceType"] == "ml.g5.24xlarge"
    assert stored["spec"]["modelCacheConfig"]["weightsCache"] == {"enabled": True, "hostPath": "/opt/dlami/nvme"}, (
        "defaults applied"
    )
    assert stored["spec"]["replicas"] == 1 and stored["spec"]["maxDeployTimeInSeconds"] == 3600
