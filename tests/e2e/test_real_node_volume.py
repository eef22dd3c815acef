"""HyperPod's kubernetesVolume manifest on the real node: the model already sits in a node directory (as on NVMe), the
model volume is the endpoint's own hostPath volume, and the `warmstart sim` model pod reads every weight file from it,
read-only, before it turns Ready. warmstart adds no init container to this pod: nothing to download, nothing root.

The stack's namespace has the cluster's default Pod Security level (privileged here), which admits hostPath volumes;
the directory lies under the stack's allowed root (the chart's `cache.allowedHostPaths`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest
from kubernetes import client

import realstack
from warmstart.render import labels, names

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

NAME = "nvme-volume"
#: a small sharded checkpoint, written straight into the node directory
SIZES = {
    "config.json": 4096,
    "model-00001-of-00002.safetensors": 8 * realstack.MiB,
    "model-00002-of-00002.safetensors": 8 * realstack.MiB,
}


def _place_model(directory: pathlib.Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, size in SIZES.items():
        (directory / name).write_bytes(os.urandom(size))
        (directory / name).chmod(0o644)
    directory.chmod(0o755)


def _manifest(stack: realstack.Stack, directory: pathlib.Path) -> dict[str, Any]:
    model = realstack.Model(bucket=stack.bucket, prefix="unused", files=())
    manifest = realstack.sim_endpoint(
        NAME, stack, model, replicas=1, weights=False, host_path=str(stack.hostpath_root), router=False
    )
    spec = manifest["spec"]
    spec["modelSourceConfig"] = {"modelSourceType": "kubernetesVolume"}
    spec["modelCacheConfig"] = {"imageCache": {"enabled": True}}
    spec["kubernetes"] = {
        "volumes": [{"name": "model-weights", "hostPath": {"path": str(directory), "type": "Directory"}}]
    }
    return manifest


def test_the_model_pod_reads_the_endpoints_own_node_directory_read_only(real_stack: realstack.Stack) -> None:
    directory = real_stack.hostpath_root / "nvme-models" / NAME
    _place_model(directory)
    keep = {p.metadata.uid for p in client.CoreV1Api(real_stack.api).list_namespaced_pod(real_stack.namespace).items}
    real_stack.create_endpoint(_manifest(real_stack, directory))
    try:
        selector = f"{labels.ENDPOINT_LABEL}={names.label_value(NAME)}"
        (pod,) = real_stack.ready_pods(selector, 1, timeout=300)
        assert pod.spec.node_name == real_stack.node
        assert not pod.spec.init_containers  # warmstart adds nothing: no preload, no root step
        (volume,) = [v for v in pod.spec.volumes if v.name == "model-weights"]
        assert volume.host_path.path == str(directory)
        (mount,) = [m for m in pod.spec.containers[0].volume_mounts if m.name == "model-weights"]
        assert (mount.mount_path, mount.read_only, mount.sub_path) == (realstack.MOUNT_PATH, True, None)
        real_stack.wait_state(NAME, "DeploymentComplete", timeout=120)
    finally:
        real_stack.remove_endpoints([NAME], keep)
