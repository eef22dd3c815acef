"""The preload container: the per-node Job and the model pods' init container run the same one, for every source."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import deployments, endpoints, fsx, jobs, keys, preload_containers
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

CONTEXT = RenderContext(
    operator_image="warmstart:test",
    preload_env_names=("AWS_ACCESS_KEY_ID",),
    preload_endpoints={"HF_ENDPOINT": "https://hub-mirror.internal"},
)
HOST_PATH = "/mnt/nvme0"
SIZE = 20_000_000_000

SOURCES: dict[str, dict[str, Any]] = {
    "s3": {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
        "modelLocation": "m",
    },
    "huggingface": {
        "modelSourceType": "huggingface",
        "huggingFaceModel": {"modelId": "org/model", "tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    },
    "fsx": {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}, "modelLocation": "m"},
    "pvc": {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "models"}, "modelLocation": "m"},
}


def endpoint_spec(
    source: dict[str, Any], *, cache: bool = True, volume: str = "model-weights"
) -> InferenceEndpointConfigSpec:
    return InferenceEndpointConfigSpec.model_validate(
        {
            "modelName": "m",
            "modelSourceConfig": source,
            "modelCacheConfig": {"weightsCache": {"enabled": cache, "hostPath": HOST_PATH, "modelSizeBytes": SIZE}},
            "instanceType": "ml.g5.24xlarge",
            "worker": {
                "image": "vllm/vllm-openai:latest",
                "modelInvocationPort": {"containerPort": 8000},
                "modelVolumeMount": {"name": volume, "mountPath": "/opt/ml/model"},
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            },
        }
    )


def model_pod(source: dict[str, Any], **changes: Any) -> dict[str, Any]:
    ref = ObjectRef(kind="InferenceEndpointConfig", name="m", namespace="ns", uid="u")
    endpoint = endpoints.from_iec(ref, endpoint_spec(source, **changes))
    manifest = deployments.deployment(endpoint, Generation(endpoint.weights_key({}), endpoint.image_key()), CONTEXT)
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def job_pod(source: dict[str, Any]) -> dict[str, Any]:
    spec = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": source, "hostPath": HOST_PATH})
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, "ns", {})
    owner = jobs.Owner(name=keys.weights_cache_name(key), namespace="ns", uid="mdcc")
    request = jobs.PreloadRequest(owner=owner, key=key, node="n1", attempt=1, generation=1, expected_bytes=SIZE)
    pod: dict[str, Any] = jobs.preload_job(request, spec, CONTEXT, [64])["spec"]["template"]["spec"]
    return pod


def without_names(container: dict[str, Any], cache_volume: str) -> dict[str, Any]:
    """The container with its own name dropped and the pod's cache volume name replaced by a placeholder."""
    mounts = [{**m, "name": "<cache>"} if m["name"] == cache_volume else m for m in container["volumeMounts"]]
    return {**{k: v for k, v in container.items() if k != "name"}, "volumeMounts": mounts}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_init_container_is_the_job_container_for_every_source(source: str) -> None:
    (owner, init), job = model_pod(SOURCES[source])["initContainers"], job_pod(SOURCES[source])
    assert (init["name"], job["containers"][0]["name"]) == ("warmstart-preload", "preload")
    assert without_names(init, "model-weights") == without_names(job["containers"][0], jobs.CACHE_VOLUME)
    # the cache's owner runs first in both pods, and is the same container
    assert without_names(owner, "model-weights") == without_names(job["initContainers"][0], jobs.CACHE_VOLUME)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_model_pod_declares_the_job_volumes_with_the_model_volume_as_cache(source: str) -> None:
    model_volumes, job_volumes = model_pod(SOURCES[source])["volumes"], job_pod(SOURCES[source])["volumes"]
    # the admin's root, which exists; a cold node's `warmstart/` is created by the kubelet (subPath), so a model pod
    # on a node no Job ever reached does not wait for a directory that never appears
    assert job_volumes[0]["hostPath"] == {"path": HOST_PATH, "type": "Directory"}
    assert model_volumes[0] == {**job_volumes[0], "name": "model-weights"}
    assert model_volumes[1:] == job_volumes[1:]


def test_only_the_cache_owner_step_runs_as_root_and_it_holds_chown_alone() -> None:
    for source in SOURCES.values():
        for pod, preload in ((model_pod(source), "warmstart-preload"), (job_pod(source), "preload")):
            owner, *rest = pod["initContainers"] + pod["containers"]
            assert owner["name"] == "warmstart-cache-owner"
            assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
            assert owner["securityContext"]["allowPrivilegeEscalation"] is False
            assert owner["command"][-1] == f"{HOST_PATH}/warmstart"  # an argument, never spliced into the script
            assert owner["volumeMounts"] == [
                {"name": pod["volumes"][0]["name"], "mountPath": f"{HOST_PATH}/warmstart", "subPath": "warmstart"}
            ]
            (writer,) = [c for c in rest if c["name"] == preload]
            assert writer["securityContext"]["runAsNonRoot"] is True and writer["securityContext"]["runAsUser"] != 0
            assert writer["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_model_server_mounts_the_node_cache_read_only_and_has_no_owner_step_without_caching() -> None:
    (server,) = model_pod(SOURCES["s3"])["containers"]
    assert [m["readOnly"] for m in server["volumeMounts"] if m["name"] == "model-weights"] == [True]
    assert [c["name"] for c in model_pod(SOURCES["s3"], cache=False)["initContainers"]] == ["warmstart-preload"]


def test_preload_is_non_root_without_rights_on_a_read_only_root_with_tmp_as_home() -> None:
    container = job_pod(SOURCES["s3"])["containers"][0]
    assert container["securityContext"] == {
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {"name": preload_containers.TMP_VOLUME, "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["env"][0] == {"name": "HOME", "value": "/tmp"}
    assert container["command"] == ["warmstart"]
    assert (container["terminationMessagePath"], container["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )


def test_cache_volume_is_the_existing_admin_root_of_which_only_warmstart_is_mounted() -> None:
    """`type: Directory`: the kubelet never creates the root; the subPath `warmstart` is resolved by the kubelet
    without following links, so a link planted at `<root>/warmstart` is never mounted."""
    for pod in (model_pod(SOURCES["s3"]), job_pod(SOURCES["s3"])):
        assert pod["volumes"][0]["hostPath"] == {"path": HOST_PATH, "type": "Directory"}
        for container in pod.get("initContainers", []) + pod["containers"]:
            for mount in container["volumeMounts"]:
                if mount["name"] == pod["volumes"][0]["name"]:
                    assert mount["subPath"].startswith("warmstart"), (container["name"], mount)


def test_cache_owner_step_never_recurses_and_hands_over_only_a_fresh_empty_root_owned_directory() -> None:
    script = preload_containers.OWNERSHIP_SCRIPT
    assert "-R" not in script and "chown -h" in script
    assert '[ "$owner" = 0:0 ]' in script and "ls -A" in script and '[ ! -L "$d" ]' in script


def test_cache_is_mounted_at_its_node_path_and_is_an_empty_dir_when_caching_is_off() -> None:
    pod = model_pod(SOURCES["s3"], cache=False)
    (init,) = pod["initContainers"]
    assert pod["volumes"][0] == {"name": "model-weights", "emptyDir": {}}
    assert init["volumeMounts"][0] == {"name": "model-weights", "mountPath": f"{HOST_PATH}/warmstart"}
    assert init["args"][init["args"].index("--root") + 1] == HOST_PATH


def test_hub_token_is_read_only_and_mounted_into_the_preload_container_alone() -> None:
    pod = model_pod(SOURCES["huggingface"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    # no write bit; readable by the non-root preload without a pod-wide fsGroup
    assert volumes[preload_containers.HF_TOKEN_VOLUME]["secret"]["defaultMode"] == 0o444
    mounting = [
        c["name"]
        for c in pod["initContainers"] + pod["containers"]
        if any(m["name"] == preload_containers.HF_TOKEN_VOLUME for m in c.get("volumeMounts") or [])
    ]
    assert mounting == ["warmstart-preload"]


def test_fsx_is_mounted_through_its_claim_read_only_never_as_an_inline_csi_volume() -> None:
    volumes = {v["name"]: v for v in model_pod(SOURCES["fsx"])["volumes"]}
    source = volumes[preload_containers.SOURCE_VOLUME]
    assert "csi" not in source
    claim = fsx.claim_name(ModelSourceConfig.model_validate(SOURCES["fsx"]).fsx_storage)  # type: ignore[arg-type]
    assert source["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}


def test_source_volumes_follow_the_source_type_not_leftover_blocks() -> None:
    stale = {**SOURCES["s3"], "fsxStorage": SOURCES["fsx"]["fsxStorage"], "kubernetesVolume": {"claimName": "old"}}
    assert preload_containers.source_volumes(ModelSourceConfig.model_validate(stale)) == []
    pod = model_pod(stale)
    assert [v["name"] for v in pod["volumes"]] == ["model-weights", preload_containers.TMP_VOLUME]
    assert "--mount-root" not in pod["initContainers"][-1]["args"]


@pytest.mark.parametrize(
    ("source", "volume"), [("pvc", "model-source"), ("fsx", "source"), ("huggingface", "hf-token"), ("s3", "tmp")]
)
def test_a_model_volume_with_a_plain_name_does_not_clash_with_the_preload_volumes(source: str, volume: str) -> None:
    names = [v["name"] for v in model_pod(SOURCES[source], volume=volume)["volumes"]]
    assert names[0] == volume and len(names) == len(set(names))


def test_operator_wide_preload_environment_reaches_pods_as_secret_references_only() -> None:
    for pod in (model_pod(SOURCES["s3"]), job_pod(SOURCES["s3"])):
        preload = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["command"] == ["warmstart"])
        (key,) = [e for e in preload["env"] if e["name"] == "AWS_ACCESS_KEY_ID"]
        assert key == {
            "name": "AWS_ACCESS_KEY_ID",
            "valueFrom": {"secretKeyRef": {"name": "warmstart-preload-env", "key": "AWS_ACCESS_KEY_ID"}},
        }


def test_mirror_endpoints_are_the_admins_plain_values_never_a_tenant_secrets() -> None:
    """A tenant may edit the preload Secret of its namespace: an endpoint taken from there could fill a shared cache
    from the tenant's own mirror. Endpoints are plain values of the operator's settings."""
    for pod in (model_pod(SOURCES["huggingface"]), job_pod(SOURCES["huggingface"])):
        preload = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["command"] == ["warmstart"])
        (hub,) = [e for e in preload["env"] if e["name"] == "HF_ENDPOINT"]
        assert hub == {"name": "HF_ENDPOINT", "value": "https://hub-mirror.internal"}


@pytest.mark.parametrize(
    "name", ["HF_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "HTTPS_PROXY", "AWS_CA_BUNDLE"]
)
def test_a_connection_setting_from_the_tenant_secret_is_refused_at_start(name: str) -> None:
    with pytest.raises(ValueError, match=f"preload.env may not set {name}"):
        RenderContext(preload_env_names=(name,))


def test_preload_endpoints_take_connection_settings_only_and_no_credentials() -> None:
    with pytest.raises(ValueError, match="not AWS_SECRET_ACCESS_KEY"):
        RenderContext(preload_endpoints={"AWS_SECRET_ACCESS_KEY": "x"})
    with pytest.raises(ValueError, match="credentials in its URL"):
        RenderContext(preload_endpoints={"HF_ENDPOINT": "https://user:secret@mirror"})


def _run_owner_step(tmp_path: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """The rendered script under the host's busybox (the image's is the same program), as root."""
    script = preload_containers.OWNERSHIP_SCRIPT.replace(preload_containers.BUSYBOX, BUSYBOX)
    script = script.replace("/dev/termination-log", str(tmp_path / "termination-log"))
    return subprocess.run([BUSYBOX, "sh", "-c", script, "sh", str(target)], capture_output=True, text=True, check=False)


BUSYBOX = shutil.which("busybox") or "/usr/bin/busybox"
needs_root_and_busybox = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(BUSYBOX), reason="runs the root step: needs root and busybox"
)


@needs_root_and_busybox
def test_owner_step_hands_a_fresh_directory_to_the_cache_uid_and_nothing_below_it(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert _run_owner_step(tmp_path, fresh).returncode == 0
    assert (fresh.stat().st_uid, fresh.stat().st_gid) == (65532, 65532)
    assert _run_owner_step(tmp_path, fresh).returncode == 0  # already handed over: nothing to do


@needs_root_and_busybox
@pytest.mark.parametrize("planted", ["file", "link"])
def test_owner_step_refuses_a_root_owned_directory_with_something_in_it(tmp_path: Path, planted: str) -> None:
    """The old step ran `chown -R` on a root-owned tree: whatever root (a tenant's privileged pod) planted there, a
    link to /etc/shadow included, became the cache uid's. Now it refuses, and changes nothing."""
    target, secret = tmp_path / "warmstart", tmp_path / "secret"
    target.mkdir()
    secret.write_text("root's")
    if planted == "link":
        (target / "weights").symlink_to(secret)
    else:
        (target / "weights").mkdir()
    done = _run_owner_step(tmp_path, target)
    assert done.returncode == 1 and "not empty" in done.stderr
    assert target.stat().st_uid == 0 and secret.stat().st_uid == 0 and os.lstat(target / "weights").st_uid == 0
    assert "refusing" in (tmp_path / "termination-log").read_text()


@needs_root_and_busybox
def test_owner_step_refuses_a_link_and_a_directory_of_another_owner(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _run_owner_step(tmp_path, link).returncode == 1 and real.stat().st_uid == 0
    os.chown(real, 1000, 1000)
    done = _run_owner_step(tmp_path, real)
    assert done.returncode == 1 and "owned by 1000:1000" in done.stderr and real.stat().st_uid == 1000
