"""Creating an endpoint never grants more than creating a pod would, on the real control plane with the real operator.

Two namespaces enforce Pod Security `baseline` and `privileged` (the API server's built-in PodSecurity admission,
namespace labels). The operator runs in-process; every CR is applied with kubectl. For each shape a tenant could pass
through `kubernetes.initContainers` / `kubernetes.volumes` (and the profile annotations of `kubernetes.annotations`):

- refused: the endpoint ends `DeploymentFailed` with `Ready=False`, reason `PodSecurityRejected` (the API server's
  PodSecurity answer to a dry-run Pod of the rendered template, naming the field), `InitContainerBeyondBaseline` (an
  init container beyond baseline, in any namespace, a privileged one included) or `HostPathNotAllowed` (the
  pass-through rules), a Warning Event with that reason, and NOTHING applied: no Deployment, no Service, no image
  cache child;
- positive controls: the same CR in a namespace whose level allows it gets its Deployment, and an init container
  within baseline is applied in both namespaces.

A JumpStartModel (resolved through a JumpStart-shaped bucket in moto's S3 server) goes through the same check.
HyperPod's kubernetesVolume manifest (tests/hyperpod-corpus/iec-v1-nvme-volume.yaml, a hostPath on NVMe as the model
volume) applies and renders in the privileged namespace and is refused, with the condition, in the baseline one.
Nothing is faked: the verdicts are the real API server's.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import yaml
from kubernetes import client

import endpointing as ep
import kube
import operating
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MIC_PLURAL
from warmstart.controllers import guarding
from warmstart.render import names, passthrough

pytestmark = pytest.mark.cluster

TIMEOUT = 120.0
PLURAL = "inferenceendpointconfigs"
CORPUS = kube.ROOT / "tests" / "hyperpod-corpus"
ROOTS = ("/opt/dlami/nvme",)
SOURCE = {
    "modelSourceType": "s3",
    "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
    "modelLocation": "models/guarded",
}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _level_namespace(api: client.ApiClient, level: str) -> str:
    core = client.CoreV1Api(api)
    name = f"t-{level[:4]}-{uuid.uuid4().hex[:8]}"
    labels = {"pod-security.kubernetes.io/enforce": level, "warmstart.io/test": "true"}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30 s"
        time.sleep(0.1)
    return name


@pytest.fixture
def levels(api_client: client.ApiClient) -> Iterator[dict[str, str]]:
    """A `baseline` and a `privileged` namespace (enforce labels), deleted afterwards."""
    made = {level: _level_namespace(api_client, level) for level in ("baseline", "privileged")}
    try:
        yield made
    finally:
        objects = client.CustomObjectsApi(api_client)
        for name in made.values():
            for plural in (PLURAL, "jumpstartmodels"):
                for item in objects.list_namespaced_custom_object(GROUP, VERSION, name, plural)["items"]:
                    if item["metadata"].get("finalizers"):
                        objects.patch_namespaced_custom_object(
                            GROUP, VERSION, name, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                        )
            client.CoreV1Api(api_client).delete_namespace(name, propagation_policy="Background")


def _iec(
    name: str,
    *,
    inits: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> Any:
    """An uncached endpoint (its pod needs no more than baseline) with an image cache, plus the pass-through."""
    spec: dict[str, Any] = {
        "modelName": name,
        "modelSourceConfig": SOURCE,
        "modelCacheConfig": {"weightsCache": {"enabled": False}, "imageCache": {"enabled": True}},
        "instanceType": "ml.g5.24xlarge",
        "worker": {
            "image": "vllm/vllm-openai:v0.11.0",
            "modelInvocationPort": {"containerPort": 8000},
            "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    }
    kubernetes: dict[str, Any] = {}
    if inits:
        kubernetes["initContainers"] = inits
    if volumes:
        kubernetes["volumes"] = volumes
    if annotations:
        kubernetes["annotations"] = annotations
    if kubernetes:
        spec["kubernetes"] = kubernetes
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceEndpointConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


def _init(name: str, security: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "busybox:1.36", "command": ["true"], **extra}
    if security is not None:
        container["securityContext"] = security
    return container


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


def _nvme_sample() -> Any:
    doc = yaml.safe_load((CORPUS / "iec-v1-nvme-volume.yaml").read_text())
    doc["spec"]["modelCacheConfig"] = {"imageCache": {"enabled": True}}
    return doc


PRIVILEGED = _iec("privileged-init", inits=[_init("escalate", {"privileged": True})])
CAPABILITIES = _iec("sys-admin", inits=[_init("caps", {"capabilities": {"add": ["SYS_ADMIN"]}})])
HOST_PORT = _iec("host-port", inits=[_init("port", ports=[{"containerPort": 80, "hostPort": 80}])])
UNCONFINED = _iec("unconfined", inits=[_init("seccomp", {"seccompProfile": {"type": "Unconfined"}})])
APPARMOR = "container.apparmor.security.beta.kubernetes.io/step"
ANNOTATED = _iec("annotated", inits=[_init("step")], annotations={APPARMOR: "unconfined"})
#: (manifest, the words of the refusal): init containers beyond baseline, refused whatever the namespace's level
INITS_REFUSED = [
    (PRIVILEGED, ["kubernetes.initContainers[0] (escalate): securityContext.privileged"]),
    (CAPABILITIES, ["kubernetes.initContainers[0] (caps): securityContext.capabilities.add SYS_ADMIN"]),
    (HOST_PORT, ["kubernetes.initContainers[0] (port): ports[].hostPort"]),
    (UNCONFINED, ["kubernetes.initContainers[0] (seccomp): securityContext.seccompProfile.type Unconfined"]),
    (ANNOTATED, [f"kubernetes.annotations[{APPARMOR}]: 'unconfined' is beyond baseline"]),
]
#: (manifest, the words Pod Security's refusal in a baseline namespace must contain)
BASELINE_REFUSED = [(_nvme_sample(), ['hostPath volumes (volume "model-weights")'])]
#: within baseline: applied in a privileged and a baseline namespace (positive control for INITS_REFUSED)
WITHIN_BASELINE = _iec("chown-init", inits=[_init("own", {"capabilities": {"add": ["CHOWN"]}})])
READ_ONLY = {"name": "model-weights", "mountPath": "/nvme", "readOnly": True}
#: (manifest, the words of the pass-through refusal), refused whatever the namespace's level
HOST_PATHS_REFUSED = [
    (_iec("etc", volumes=[_host("etc", "/etc")]), ["kubernetes.volumes[0] (etc): hostPath /etc is not under"]),
    (_iec("slash", volumes=[_host("root", "/")]), ["kubernetes.volumes[0] (root): hostPath / is not under"]),
    (
        _iec("dotdot", volumes=[_host("up", "/opt/dlami/nvme/../../etc")]),
        ["kubernetes.volumes[0] (up)", "normalized absolute path"],
    ),
    (
        _iec("cache", volumes=[_host("cache", "/opt/dlami/nvme/warmstart/weights")]),
        ["kubernetes.volumes[0] (cache)", "inside warmstart's cache"],
    ),
    (
        _iec(
            "writable",
            volumes=[_host("nvme", "/opt/dlami/nvme/qwen")],
            inits=[_init("fill", volumeMounts=[{"name": "nvme", "mountPath": "/nvme"}])],
        ),
        ["kubernetes.initContainers[0] (fill).volumeMounts[0]: hostPath volume nvme must be mounted readOnly: true"],
    ),
]


def _apply(kubeconfig: str, manifest: Any, namespace: str) -> None:
    result = kube.apply(kubeconfig, copy.deepcopy(manifest), namespace, check=False)
    assert result.returncode == 0, f"{manifest['metadata']['name']}: {result.stderr}"


def _refused(api: client.ApiClient, namespace: str, name: str, reason: str, plural: str = PLURAL) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        status = ep.status(api, namespace, name, plural)
        found = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
        return found if found and found["reason"] == reason and status.get("state") == "DeploymentFailed" else None

    return kube.wait_for(ready, TIMEOUT, what=f"{name} in {namespace} refused with {reason}")


def _deployment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = api.sanitize_for_serialization(
            client.AppsV1Api(api).read_namespaced_deployment(names.child_name(name), namespace)
        )
        return found
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _nothing_applied(api: client.ApiClient, namespace: str, name: str) -> None:
    """No child of `name`: no Deployment, no Service, and no image cache (the first child an endpoint gets)."""
    assert _deployment(api, namespace, name) is None, name
    services = client.CoreV1Api(api).list_namespaced_service(namespace).items
    assert names.child_name(name) not in [s.metadata.name for s in services], name
    caches = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, MIC_PLURAL)
    parents = [p["name"] for c in caches["items"] for p in c["spec"].get("parentReferences") or []]
    assert name not in parents, name


def _warning_event(api: client.ApiClient, namespace: str, name: str, reason: str) -> Any:
    def found() -> Any:
        events = client.CoreV1Api(api).list_namespaced_event(namespace).items
        return next(
            (e for e in events if e.involved_object.name == name and e.reason == reason and e.type == "Warning"), None
        )

    return kube.wait_for(found, TIMEOUT, what=f"a Warning Event {reason} on {name}")


def test_pod_security_refuses_what_the_namespace_refuses_before_anything_is_applied(
    cluster: Any, api_client: client.ApiClient, levels: dict[str, str]
) -> None:
    kubeconfig = str(cluster.kubeconfig)
    baseline, privileged = levels["baseline"], levels["privileged"]
    render = {"operator_image": "warmstart:test", "allowed_host_paths": ROOTS}
    with operating.operator(kubeconfig, list(levels.values()), render=render):
        for manifest in (_iec("plain"), WITHIN_BASELINE):
            _apply(kubeconfig, manifest, baseline)
            _apply(kubeconfig, manifest, privileged)
        for manifest, _ in [*BASELINE_REFUSED, *INITS_REFUSED]:
            _apply(kubeconfig, manifest, baseline)
            _apply(kubeconfig, manifest, privileged)

        # positive controls: the plain endpoint and an init container within baseline in both namespaces, and what
        # only the namespace's level refuses (a hostPath model volume) where the level is privileged
        for namespace in (baseline, privileged):
            for name in ("plain", "chown-init"):
                found = kube.wait_for(
                    lambda n=name, s=namespace: _deployment(api_client, s, n), TIMEOUT, what=f"{name} in {namespace}"
                )
                assert found is not None
        for manifest, _ in BASELINE_REFUSED:
            name = manifest["metadata"]["name"]
            kube.wait_for(lambda n=name: _deployment(api_client, privileged, n), TIMEOUT, what=f"{name} applied")

        for manifest, words in BASELINE_REFUSED:
            name = manifest["metadata"]["name"]
            ready = _refused(api_client, baseline, name, guarding.POD_SECURITY_REJECTED)
            assert ready["status"] == "False"
            assert 'violates PodSecurity "baseline:latest"' in ready["message"], ready["message"]
            for word in words:
                assert word in ready["message"], (name, ready["message"])
            _warning_event(api_client, baseline, name, guarding.POD_SECURITY_REJECTED)
            _nothing_applied(api_client, baseline, name)

        # an init container beyond baseline never runs, even where the namespace is privileged: an endpoint never
        # grants node root
        for manifest, words in INITS_REFUSED:
            name = manifest["metadata"]["name"]
            for namespace in (baseline, privileged):
                ready = _refused(api_client, namespace, name, passthrough.INIT_REASON)
                assert "at most at Pod Security baseline, whatever the namespace's level" in ready["message"]
                for word in words:
                    assert word in ready["message"], (name, ready["message"])
                _warning_event(api_client, namespace, name, passthrough.INIT_REASON)
                _nothing_applied(api_client, namespace, name)

        # HyperPod's NVMe manifest where the level allows it: the user's hostPath is the model volume, read-only,
        # once, and warmstart adds no preload (nothing to download) and no root step
        nvme = _deployment(api_client, privileged, "nvme-k8s-volume")
        assert nvme is not None
        pod = nvme["spec"]["template"]["spec"]
        assert pod["volumes"] == [
            {
                "name": "model-weights",
                "hostPath": {"path": "/opt/dlami/nvme/qwen2.5-vl-7b-instruct", "type": "Directory"},
            }
        ]
        assert "initContainers" not in pod
        assert pod["containers"][0]["volumeMounts"] == [
            {"name": "model-weights", "mountPath": "/opt/ml/model", "readOnly": True}
        ]
        assert ep.status(api_client, privileged, "nvme-k8s-volume", PLURAL)["state"] != "DeploymentFailed"


def test_host_paths_outside_the_roots_or_writable_are_refused_even_where_the_level_allows_them(
    cluster: Any, api_client: client.ApiClient, levels: dict[str, str]
) -> None:
    kubeconfig = str(cluster.kubeconfig)
    privileged = levels["privileged"]
    render = {"operator_image": "warmstart:test", "allowed_host_paths": ROOTS}
    allowed = _iec(
        "read-only",
        volumes=[_host("nvme", "/opt/dlami/nvme/qwen")],
        inits=[_init("look", volumeMounts=[{"name": "nvme", "mountPath": "/nvme", "readOnly": True}])],
    )
    with operating.operator(kubeconfig, [privileged], render=render):
        for manifest, _ in [*HOST_PATHS_REFUSED, (allowed, [])]:
            _apply(kubeconfig, manifest, privileged)
        # positive control: under the root, read-only
        applied = kube.wait_for(lambda: _deployment(api_client, privileged, "read-only"), TIMEOUT, what="read-only")
        assert {"name": "nvme", "hostPath": {"path": "/opt/dlami/nvme/qwen", "type": "Directory"}} in applied["spec"][
            "template"
        ]["spec"]["volumes"]
        for manifest, words in HOST_PATHS_REFUSED:
            name = manifest["metadata"]["name"]
            ready = _refused(api_client, privileged, name, passthrough.REASON)
            for word in words:
                assert word in ready["message"], (name, ready["message"])
            _warning_event(api_client, privileged, name, passthrough.REASON)
            _nothing_applied(api_client, privileged, name)


def test_host_namespaces_cannot_be_expressed_in_an_endpoint(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    """hostNetwork, hostPID and hostIPC are pod fields the CR has no place for: strict field validation refuses them."""
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        manifest = _iec("host-ns")
        manifest["spec"]["kubernetes"] = {field: True}
        result = kube.apply(str(cluster.kubeconfig), manifest, namespace, check=False)
        assert result.returncode != 0, field
        assert f'unknown field "spec.kubernetes.{field}"' in result.stderr, result.stderr


REGION = "us-west-2"
MODEL = "huggingface-llm-qwen2-0-5b"


@pytest.fixture(scope="module")
def jumpstart() -> Iterator[dict[str, str]]:
    """A JumpStart-shaped content bucket with one ungated model."""
    server = MotoServer(CREDENTIALS).start()
    s3 = boto3.client(
        "s3", endpoint_url=server.url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    bucket = f"jsc-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    spec_key = f"community_models/{MODEL}/specs_v1.0.0.json"
    image = "763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.31.0-lmi13.0.0-cu124"
    spec = {
        "model_id": MODEL,
        "version": "1.0.0",
        "hosting_artifact_key": f"{MODEL}/artifacts/inference/v1.0.0/",
        "hosting_artifact_s3_data_type": "S3Prefix",
        "hosting_instance_type_variants": {
            "regional_aliases": {REGION: {"djl": image}},
            "variants": {"g5": {"regional_properties": {"image_uri": "$djl"}}},
        },
    }
    s3.put_object(Bucket=bucket, Key=spec_key, Body=json.dumps(spec).encode())
    manifest = [{"model_id": MODEL, "version": "1.0.0", "spec_key": spec_key}]
    s3.put_object(Bucket=bucket, Key="models_manifest.json", Body=json.dumps(manifest).encode())
    try:
        yield {"bucket": bucket, "url": server.url}
    finally:
        server.stop()


def _jsm(name: str, kubernetes: dict[str, Any] | None = None) -> Any:
    spec: dict[str, Any] = {
        "model": {"modelId": MODEL, "modelVersion": "1.0.0"},
        "server": {"instanceType": "ml.g5.12xlarge"},
        "modelCacheConfig": {"imageCache": {"enabled": True}},
    }
    if kubernetes:
        spec["kubernetes"] = kubernetes
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JumpStartModel", "metadata": {"name": name}, "spec": spec}


def test_a_jumpstart_model_is_checked_the_same_way(
    cluster: Any,
    api_client: client.ApiClient,
    levels: dict[str, str],
    jumpstart: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": jumpstart["url"]}.items():
        monkeypatch.setenv(key, value)
    kubeconfig = str(cluster.kubeconfig)
    baseline, privileged = levels["baseline"], levels["privileged"]
    render = {
        "operator_image": "warmstart:test",
        "allowed_host_paths": ROOTS,
        "jumpstart_bucket": jumpstart["bucket"],
        "jumpstart_region": REGION,
    }
    escalating = {"initContainers": [_init("escalate", {"privileged": True})]}
    with operating.operator(kubeconfig, list(levels.values()), render=render):
        _apply(kubeconfig, _jsm("plain"), baseline)
        _apply(kubeconfig, _jsm("escalating", escalating), baseline)
        _apply(kubeconfig, _jsm("escalating", escalating), privileged)
        _apply(kubeconfig, _jsm("slash", {"volumes": [_host("root", "/")]}), privileged)
        kube.wait_for(lambda: _deployment(api_client, baseline, "plain"), TIMEOUT, what="the plain JumpStartModel")
        for namespace in (baseline, privileged):
            ready = _refused(api_client, namespace, "escalating", passthrough.INIT_REASON, "jumpstartmodels")
            assert "initContainers[0] (escalate): securityContext.privileged" in ready["message"], ready["message"]
            _nothing_applied(api_client, namespace, "escalating")
        ready = _refused(api_client, privileged, "slash", passthrough.REASON, "jumpstartmodels")
        assert "kubernetes.volumes[0] (root): hostPath / is not under" in ready["message"], ready["message"]
        _nothing_applied(api_client, privileged, "slash")
