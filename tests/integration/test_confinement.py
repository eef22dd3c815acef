"""Confinement on the real control plane: cache roots refused at admission and by the operator, control planes kept out.

- The chart's ValidatingAdmissionPolicy (rendered by the real helm, applied to the real API server) rejects an
  InferenceEndpointConfig, JumpStartModel or ModelDataCacheConfig naming a cache root the values do not allow, at
  create time, with a message naming the allowed roots; only the allowed roots themselves pass (a path under one
  could be another cache's own directory).
- Without the policy, the operator refuses the same objects itself: a status condition, and no Job ever mounts the root.
- A cache or an image pre-pull with no targeting at all never puts a pod on a node labelled control-plane, and the
  pods tolerate only the GPU node-pool taints: a node with some other taint gets no pre-pull pod.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

import kube
import operating
from nodepool import NodePool
from warmstart.api import API_VERSION, GROUP, VERSION
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL, MIC_KIND, MIC_PLURAL
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.render import daemonsets, hostpaths, labels

pytestmark = pytest.mark.cluster

CHART = kube.ROOT / "charts" / "warmstart"
TIMEOUT = 120.0
SOURCE = {
    "modelSourceType": "s3",
    "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
    "modelLocation": "models/confined",
}
PRELOADED = json.dumps(
    {"outcome": "Succeeded", "reason": "Downloaded", "message": "ok", "bytes": 10, "seconds": 1.0, "files": 1}
)


CONTROL_PLANE = "node-role.kubernetes.io/control-plane"


def _names(api: client.ApiClient, namespace: str, plural: str) -> list[str]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
    return [item["metadata"]["name"] for item in found]


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def _iec(namespace: str, name: str, host_path: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceEndpointConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "modelName": name,
            "modelSourceConfig": SOURCE,
            "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": host_path}},
            "instanceType": "ml.g5.24xlarge",
            "worker": {
                "image": "vllm/vllm-openai:v0.11.0",
                "modelInvocationPort": {"containerPort": 8000},
                "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            },
        },
    }


def _jsm(namespace: str, name: str, host_path: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "JumpStartModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"modelId": "meta-textgeneration-llama-3-8b"},
            "server": {"instanceType": "ml.g5.24xlarge"},
            "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": host_path}},
        },
    }


def _mdcc(namespace: str, name: str, host_path: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"modelSourceConfig": SOURCE, **spec}
    if host_path is not None:
        body["hostPath"] = host_path
    return {
        "apiVersion": API_VERSION,
        "kind": MDCC_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def _create(api: client.ApiClient, manifest: dict[str, Any], dry_run: bool = True) -> client.ApiException | None:
    """Create (server-side dry run by default); the API error, or None when admitted."""
    meta = manifest["metadata"]
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], kube.PLURALS[manifest["kind"]], manifest,
            dry_run="All" if dry_run else None,
        )  # fmt: skip
    except client.ApiException as error:
        return error
    return None


@pytest.fixture
def admission_policy(
    cluster: Any, helm: pathlib.Path, namespace: str, tmp_path: pathlib.Path
) -> Iterator[list[dict[str, Any]]]:
    """The chart's policy and binding, rendered by helm for this namespace only, applied, removed afterwards."""
    release = f"adm-{uuid.uuid4().hex[:6]}"
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"watchNamespaces": [namespace], "cache": {"allowedHostPaths": ["/opt/dlami/nvme", "/mnt/models"]}}
        )
    )
    rendered = subprocess.run(
        [str(helm), "template", release, str(CHART), "-n", namespace, "-f", str(values), "--kube-version", "1.37.0",
         "-s", "templates/admission.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"].endswith("-cache-roots")]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    kube.apply(str(cluster.kubeconfig), yaml.safe_dump_all(docs))
    try:
        yield docs
    finally:
        for doc in reversed(docs):
            kube.kubectl(
                str(cluster.kubeconfig),
                "delete",
                doc["kind"],
                doc["metadata"]["name"],
                "--ignore-not-found",
                check=False,
            )


def test_admission_rejects_other_cache_roots_of_every_kind_and_admits_allowed_ones(
    api_client: client.ApiClient, namespace: str, admission_policy: list[dict[str, Any]]
) -> None:
    # the policy takes effect once the API server has loaded and type-checked it: wait for the first rejection
    refused = kube.wait_for(
        lambda: _create(api_client, _iec(namespace, "escape", "/var/lib/kubelet")), 60, what="the policy to reject"
    )
    assert refused.status in (403, 422), refused.body
    body = json.loads(refused.body)["message"]
    assert "hostPath /var/lib/kubelet is not an allowed cache root" in body and "/opt/dlami/nvme, /mnt/models" in body
    for manifest in (
        _iec(namespace, "root", "/"),
        _iec(namespace, "prefix-trick", "/opt/dlami/nvme-evil"),
        _jsm(namespace, "jsm-escape", "/etc"),
        _mdcc(namespace, "weights-escape", "/home"),
        _iec(namespace, "under-root", "/opt/dlami/nvme/team-a"),
        # another cache's own directory under an allowed root: mounting <it>/warmstart would expose that cache
        _mdcc(namespace, "weights-into-a-cache", "/opt/dlami/nvme/warmstart/keys/0123456789abcdef0123456789abcdef"),
    ):
        error = _create(api_client, manifest)
        assert error is not None and "is not an allowed cache root" in json.loads(error.body)["message"], manifest
    for manifest in (
        _iec(namespace, "default-root", "/opt/dlami/nvme"),
        _iec(namespace, "trailing-slash", "/opt/dlami/nvme/"),
        _iec(namespace, "second-root", "/mnt/models"),
        _jsm(namespace, "jsm-ok", "/opt/dlami/nvme"),
        _mdcc(namespace, "weights-defaulted"),  # the CRD default, /opt/dlami/nvme
    ):
        assert _create(api_client, manifest) is None, manifest
    caching_off = _iec(namespace, "no-cache", "/etc")
    caching_off["spec"]["modelCacheConfig"]["weightsCache"]["enabled"] = False
    assert _create(api_client, caching_off) is None, "a root that is never mounted is not refused"


def test_the_operator_refuses_other_cache_roots_when_admission_did_not(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    render = {"operator_image": "warmstart:test", "allowed_host_paths": ("/opt/dlami/nvme",)}
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render):
        assert _create(api_client, _mdcc(namespace, "weights-escape", "/var/lib/kubelet"), dry_run=False) is None
        assert _create(api_client, _iec(namespace, "escape", "/etc"), dry_run=False) is None
        inside = "/opt/dlami/nvme/warmstart/keys/0123456789abcdef0123456789abcdef"
        assert _create(api_client, _mdcc(namespace, "weights-inside", inside), dry_run=False) is None

        def refused(plural: str, name: str) -> dict[str, Any] | None:
            status = (kube.get_custom(api_client, namespace, plural, name) or {}).get("status") or {}
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            return ready if ready.get("reason") == hostpaths.REASON else None

        cache = kube.wait_for(lambda: refused(MDCC_PLURAL, "weights-escape"), TIMEOUT, what="the cache refused")
        assert "/var/lib/kubelet" in cache["message"]
        endpoint = kube.wait_for(
            lambda: refused("inferenceendpointconfigs", "escape"), TIMEOUT, what="endpoint refused"
        )
        assert "/etc is not an allowed cache root" in endpoint["message"]
        inside_cache = kube.wait_for(lambda: refused(MDCC_PLURAL, "weights-inside"), TIMEOUT, what="refused")
        assert "must equal an allowed root" in inside_cache["message"]
        assert not client.BatchV1Api(api_client).list_namespaced_job(namespace).items, "no Job mounts a refused root"
        state = kube.get_custom(api_client, namespace, "inferenceendpointconfigs", "escape")["status"]["state"]  # type: ignore[index]
        assert state == "DeploymentFailed"
        # nothing was created that mounts the root: no Job, no cache child, no Deployment
        assert not client.BatchV1Api(api_client).list_namespaced_job(namespace).items
        caches = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            GROUP, VERSION, namespace, MDCC_PLURAL
        )
        assert sorted(c["metadata"]["name"] for c in caches["items"]) == ["weights-escape", "weights-inside"]
        assert not client.AppsV1Api(api_client).list_namespaced_deployment(namespace).items
        for plural, name in (
            (MDCC_PLURAL, "weights-escape"),
            (MDCC_PLURAL, "weights-inside"),
            ("inferenceendpointconfigs", "escape"),
        ):
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        kube.wait_for(
            lambda: not _names(api_client, namespace, MDCC_PLURAL),
            TIMEOUT, what="the refused cache deleted",
        )  # fmt: skip


def test_untargeted_caches_never_land_on_control_plane_nodes_or_foreign_taints(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, gpu_nodes = own_nodes.add(2, tainted=True)  # nvidia.com/gpu:NoSchedule, as a GPU pool
    core = client.CoreV1Api(api_client)
    control_plane = f"{own_nodes.prefix}-control-plane"
    reserved = f"{own_nodes.prefix}-reserved"
    for name, labels_, taints in (
        (control_plane, {CONTROL_PLANE: ""}, [kwok_nodes.Taint(CONTROL_PLANE)]),
        (reserved, {}, [kwok_nodes.Taint("example.com/reserved-for", "other-team")]),
    ):  # fmt: skip
        core.create_node(kwok_nodes.node_manifest(name, instance_type, labels=labels_, taints=taints))
        own_nodes.created.append(name)
    kube.wait_for(
        lambda: kwok_nodes.ready_nodes(api_client, [control_plane, reserved]) == {control_plane, reserved}, 120
    )
    annotations = {"sim.warmstart.io/duration": "1s", "sim.warmstart.io/termination-message": PRELOADED}
    render = {"operator_image": "warmstart:test", "preload_pod_annotations": annotations}
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render):
        # no instance type, no affinity: every node is a candidate
        kube.create_custom(api_client, _mdcc(namespace, "weights-everywhere"))
        meta = {"name": "image-everywhere", "namespace": namespace}
        mic = {
            "apiVersion": API_VERSION,
            "kind": MIC_KIND,
            "metadata": meta,
            "spec": {"image": "vllm/vllm-openai:v0.11"},
        }
        kube.create_custom(api_client, mic)

        def job_nodes() -> set[str]:
            found = client.BatchV1Api(api_client).list_namespaced_job(namespace, label_selector=labels.MDCC_LABEL).items
            return {j.metadata.labels[labels.NODE_LABEL] for j in found}

        def prepull_nodes() -> set[str]:
            selector = f"{labels.COMPONENT}={daemonsets.COMPONENT}"
            return {
                p.spec.node_name
                for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if p.spec.node_name
            }

        kube.wait_for(lambda: set(gpu_nodes) <= job_nodes(), TIMEOUT, what="preload Jobs on the GPU nodes")
        kube.wait_for(lambda: set(gpu_nodes) <= prepull_nodes(), TIMEOUT, what="pre-pull pods on the GPU nodes")
        assert control_plane not in job_nodes()
        assert control_plane not in prepull_nodes() and reserved not in prepull_nodes()
        for pod in core.list_namespaced_pod(namespace).items:
            assert {"operator": "Exists"} not in [
                {k: v for k, v in t.to_dict().items() if v is not None} for t in pod.spec.tolerations or []
            ], pod.metadata.name
        for plural, name in ((MDCC_PLURAL, "weights-everywhere"), (MIC_PLURAL, "image-everywhere")):
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        kube.wait_for(
            lambda: not _names(api_client, namespace, MDCC_PLURAL),
            TIMEOUT, what="the cache deleted",
        )  # fmt: skip
