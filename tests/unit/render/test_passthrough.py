"""Pass-through rules: tenants' hostPath volumes stay under the admin's roots, out of the cache, and read-only; init
containers, and the profile annotations that reach them, stay within Pod Security baseline; and HyperPod's
kubernetesVolume without a claim renders the user's volume as the model volume."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.controllers import guarding
from warmstart.render import deployments, endpoints, passthrough
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

ROOTS = ("/opt/dlami/nvme", "/mnt/cache/")
CORPUS = pathlib.Path(__file__).resolve().parents[2] / "hyperpod-corpus"
NVME = yaml.safe_load((CORPUS / "iec-v1-nvme-volume.yaml").read_text())
CONTEXT = RenderContext(operator_image="warmstart:test")


def _endpoint(spec: dict[str, Any]) -> endpoints.Endpoint:
    ref = ObjectRef(kind="InferenceEndpointConfig", name="nvme", namespace="ns", uid="u-1")
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))


def _with(volumes: list[dict[str, Any]], inits: list[dict[str, Any]] | None = None) -> endpoints.Endpoint:
    spec = copy.deepcopy(NVME["spec"])
    spec["kubernetes"] = {"volumes": volumes, **({"initContainers": inits} if inits else {})}
    return _endpoint(spec)


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": "Directory"}}


@pytest.mark.parametrize(
    "path", ["/opt/dlami/nvme/qwen", "/opt/dlami/nvme/team-a/qwen/v1", "/mnt/cache/model", "/opt/dlami/nvme/warmstarts"]
)
def test_paths_strictly_under_an_allowed_root_pass(path: str) -> None:
    assert passthrough.host_path_refusal(path, ROOTS) is None


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/", "not under an allowed root"),
        ("/etc", "not under an allowed root"),
        ("/var/lib/kubelet/pods", "not under an allowed root"),
        ("/opt/dlami/nvme", "not under an allowed root"),  # the root itself holds warmstart's cache
        ("/opt/dlami/nvme-other/x", "not under an allowed root"),
        ("/opt/dlami/nvme/../../etc", "normalized"),
        ("/opt/dlami/nvme/./x", "normalized"),
        ("/opt/dlami/nvme//x", "normalized"),
        ("/opt/dlami/nvme/x/", "normalized"),
        ("opt/dlami/nvme/x", "normalized"),
        ("", "normalized"),
        ("/opt/dlami/nvme/warmstart", "inside warmstart's cache"),
        ("/opt/dlami/nvme/warmstart/weights/k", "inside warmstart's cache"),
        ("/opt/dlami/nvme/team-a/warmstart/weights", "inside warmstart's cache"),
    ],
)
def test_every_other_path_is_refused_with_why(path: str, why: str) -> None:
    message = passthrough.host_path_refusal(path, ROOTS)
    assert message is not None and why in message, message


def test_a_refusal_names_the_field_the_volume_and_the_allowed_roots() -> None:
    (message,) = passthrough.refusals(_with([{"name": "cfg", "emptyDir": {}}, _host("root", "/")]), ROOTS)
    assert message.startswith("kubernetes.volumes[1] (root): hostPath / is not under an allowed root")
    assert "/opt/dlami/nvme, /mnt/cache/" in message and "cache.allowedHostPaths" in message


def test_init_containers_must_mount_host_paths_read_only_other_volumes_as_they_like() -> None:
    loader = {
        "name": "loader",
        "image": "busybox",
        "volumeMounts": [
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "model-weights", "mountPath": "/model"},
        ],
    }
    volumes = [_host("model-weights", "/opt/dlami/nvme/qwen"), {"name": "scratch", "emptyDir": {}}]
    (message,) = passthrough.refusals(_with(volumes, [loader]), ROOTS)
    assert message == (
        "kubernetes.initContainers[0] (loader).volumeMounts[1]: hostPath volume model-weights must be mounted "
        "readOnly: true"
    )
    loader["volumeMounts"][1]["readOnly"] = True
    assert passthrough.refusals(_with(volumes, [loader]), ROOTS) == []


def test_hyperpods_nvme_volume_is_the_model_volume_read_only_without_a_preload() -> None:
    endpoint = _endpoint(NVME["spec"])
    assert endpoint.model_on_volume and not endpoint.weights_enabled
    manifest = deployments.deployment(endpoint, Generation(endpoint.weights_key({}), endpoint.image_key()), CONTEXT)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["volumes"] == NVME["spec"]["kubernetes"]["volumes"]  # the user's volume, once, as written
    assert "initContainers" not in pod  # no preload, no cache owner: nothing to download, nothing root
    (worker,) = pod["containers"]
    assert worker["volumeMounts"] == [{"name": "model-weights", "mountPath": "/opt/ml/model", "readOnly": True}]
    assert passthrough.refusals(endpoint, ROOTS) == []


def test_a_claim_source_still_preloads_from_the_claim() -> None:
    spec = copy.deepcopy(NVME["spec"])
    spec["modelSourceConfig"]["kubernetesVolume"] = {"claimName": "weights"}
    del spec["kubernetes"]
    endpoint = _endpoint(spec)
    assert not endpoint.model_on_volume
    pod = deployments.deployment(endpoint, Generation("k", "i"), CONTEXT)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == [deployments.INIT_CONTAINER]
    assert {"claimName": "weights", "readOnly": True} in [v.get("persistentVolumeClaim") for v in pod["volumes"]]


def test_the_dry_run_pod_is_the_replica_sets_pod() -> None:
    endpoint = _endpoint(NVME["spec"])
    manifest = deployments.deployment(endpoint, Generation("k", "i"), CONTEXT)
    pod = guarding.dry_run_pod(manifest)
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["generateName"] == f"{endpoint.child_name}-"
    assert pod["spec"] == manifest["spec"]["template"]["spec"]
    assert pod["metadata"]["labels"] == manifest["spec"]["template"]["metadata"]["labels"]
    assert "ownerReferences" not in pod["metadata"]


def test_a_volume_source_without_its_volume_is_named_as_hyperpod_does() -> None:
    assert passthrough.missing_model_volume(_endpoint(NVME["spec"])) is None
    message = passthrough.missing_model_volume(_with([{"name": "other", "emptyDir": {}}]))
    assert message is not None and "named model-weights (worker.modelVolumeMount.name)" in message
    assert passthrough.VOLUME_REASON == "KubernetesVolumeValidationFailed"


def _init(**security: Any) -> dict[str, Any]:
    return {"name": "step", "image": "busybox", "securityContext": security}


@pytest.mark.parametrize(
    ("init", "named"),
    [
        (_init(privileged=True), "securityContext.privileged"),
        (_init(capabilities={"add": ["CHOWN", "SYS_ADMIN"]}), "securityContext.capabilities.add SYS_ADMIN"),
        (_init(seccompProfile={"type": "Unconfined"}), "securityContext.seccompProfile.type Unconfined"),
        (_init(appArmorProfile={"type": "Unconfined"}), "securityContext.appArmorProfile.type Unconfined"),
        (_init(procMount="Unmasked"), "securityContext.procMount Unmasked"),
        (_init(windowsOptions={"hostProcess": True}), "securityContext.windowsOptions.hostProcess"),
        (_init(seLinuxOptions={"type": "spc_t"}), "securityContext.seLinuxOptions"),
        (_init(seLinuxOptions={"user": "system_u"}), "securityContext.seLinuxOptions"),
        ({"name": "step", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 80}]}, "ports[].hostPort"),
    ],
)
def test_an_init_container_beyond_baseline_is_refused_whatever_the_namespace(init: dict[str, Any], named: str) -> None:
    (message,) = passthrough.init_container_refusals(_with([], [init]))
    assert message.startswith(f"kubernetes.initContainers[0] (step): {named}"), message
    assert "at most at Pod Security baseline, whatever the namespace's level" in message


def test_an_init_container_within_baseline_passes() -> None:
    within = _init(
        capabilities={"add": ["CHOWN", "NET_BIND_SERVICE"], "drop": ["ALL"]},
        seccompProfile={"type": "RuntimeDefault"},
        procMount="Default",
        seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"},
        privileged=False,
        runAsUser=0,
    )
    plain = {"name": "plain", "image": "busybox", "ports": [{"containerPort": 80}]}
    assert passthrough.init_container_refusals(_with([], [within, plain])) == []


def _annotated(annotations: dict[str, str], inits: list[dict[str, Any]] | None = None) -> endpoints.Endpoint:
    spec = copy.deepcopy(NVME["spec"])
    spec["kubernetes"] = {**spec["kubernetes"], "annotations": annotations}
    if inits is not None:
        spec["kubernetes"]["initContainers"] = inits
    return _endpoint(spec)


STEP = {"name": "step", "image": "busybox"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("container.apparmor.security.beta.kubernetes.io/step", "unconfined"),
        ("container.apparmor.security.beta.kubernetes.io/step", "runtime/other"),
        ("container.seccomp.security.alpha.kubernetes.io/step", "unconfined"),
        ("container.seccomp.security.alpha.kubernetes.io/step", ""),
        ("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
        # warmstart's own init container keeps the profile warmstart gives it
        (f"container.apparmor.security.beta.kubernetes.io/{deployments.INIT_CONTAINER}", "unconfined"),
    ],
)
def test_a_legacy_profile_annotation_beyond_baseline_is_refused_like_the_field(key: str, value: str) -> None:
    (message,) = passthrough.init_container_refusals(_annotated({key: value}, [STEP]))
    assert message.startswith(f"kubernetes.annotations[{key}]: {value!r} is beyond baseline ("), message
    assert "at most at Pod Security baseline, whatever the namespace's level" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("container.apparmor.security.beta.kubernetes.io/step", "runtime/default"),
        ("container.apparmor.security.beta.kubernetes.io/step", "localhost/k8s-step"),
        ("container.apparmor.security.beta.kubernetes.io/step", ""),
        ("container.seccomp.security.alpha.kubernetes.io/step", "runtime/default"),
        ("container.seccomp.security.alpha.kubernetes.io/step", "docker/default"),
        ("seccomp.security.alpha.kubernetes.io/pod", "localhost/profiles/audit.json"),
        # the model server runs as its image needs: the namespace's level decides, in the operator's dry run
        ("container.apparmor.security.beta.kubernetes.io/worker", "unconfined"),
        ("container.seccomp.security.alpha.kubernetes.io/worker", "unconfined"),
        ("example.com/unconfined", "unconfined"),
    ],
)
def test_a_profile_annotation_within_baseline_or_for_the_model_server_passes(key: str, value: str) -> None:
    assert passthrough.init_container_refusals(_annotated({key: value}, [STEP])) == []


def test_the_pods_seccomp_annotation_is_refused_only_when_it_reaches_a_passed_through_init_container() -> None:
    pod = {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}
    assert passthrough.init_container_refusals(_annotated(pod)) == []  # the model server's alone
    (message,) = passthrough.init_container_refusals(_annotated(pod, [STEP]))
    assert "the pod's profile applies to the init containers passed through" in message


def test_the_model_server_container_is_the_one_the_annotations_may_loosen() -> None:
    endpoint = _annotated({})
    pod = deployments.deployment(endpoint, Generation("k", "i"), CONTEXT)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == [passthrough.MODEL_SERVER_CONTAINER]


def test_the_endpoints_annotations_reach_the_model_pod_as_written() -> None:
    annotations = {"container.apparmor.security.beta.kubernetes.io/step": "unconfined"}
    endpoint = _annotated(annotations, [STEP])
    template = deployments.deployment(endpoint, Generation("k", "i"), CONTEXT)["spec"]["template"]
    assert template["metadata"]["annotations"].items() >= annotations.items()  # what the rules above are for
    assert "step" in [c["name"] for c in template["spec"]["initContainers"]]
