"""The local cluster is a real one: real scheduler, real controllers, kwok nodes, and our stage hooks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes import client

import kube
from warmstart.localcluster import nodes, versions

pytestmark = pytest.mark.cluster

T = TypeVar("T")
TIMEOUT = 60.0


def eventually(probe: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
    """Poll ``probe`` until it returns something truthy (``kube.wait_for``, with this module's timeout)."""
    return kube.wait_for(probe, timeout=timeout, interval=0.2, what=what)


def pod_template(labels: dict[str, str], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}], **spec},
    }


def job(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": pod_template(labels, annotations, restartPolicy="Never")},
    }


def job_condition(batch: client.BatchV1Api, namespace: str, name: str) -> str | None:
    status = batch.read_namespaced_job_status(name, namespace).status
    for condition in status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return str(condition.type)
    return None


def pods(core: client.CoreV1Api, namespace: str, app: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"app={app}").items)


def test_version_is_the_built_kubernetes(api_client: client.ApiClient) -> None:
    assert client.VersionApi(api_client).get_code().git_version == versions.KUBERNETES


def test_default_nodes_carry_gpu_shape(api_client: client.ApiClient) -> None:
    by_type: dict[str, list[Any]] = {}
    for node in client.CoreV1Api(api_client).list_node(label_selector="type=kwok").items:
        by_type.setdefault(node.metadata.labels[nodes.INSTANCE_TYPE_LABEL], []).append(node)
    assert len(by_type["ml.g5.24xlarge"]) >= 4 and len(by_type["ml.p5.48xlarge"]) >= 2
    p5 = by_type["ml.p5.48xlarge"][0]
    assert p5.status.allocatable["nvidia.com/gpu"] == "8"
    assert p5.metadata.annotations[nodes.NVME_ANNOTATION] == "30400000000000"
    assert any(c.type == "Ready" and c.status == "True" for c in p5.status.conditions)


def test_scheduler_honours_preferred_instance_type(api_client: client.ApiClient, namespace: str) -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": nodes.INSTANCE_TYPE_LABEL, "operator": "In", "values": ["ml.p5.48xlarge"]}
                        ]
                    },
                }
            ]
        }
    }
    labels = {"app": "preferring"}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "preferring"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": pod_template(labels, affinity=affinity),
        },
    }
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, body)
    core = client.CoreV1Api(api_client)

    def running() -> list[Any] | None:
        found = pods(core, namespace, "preferring")
        return found if len(found) == 2 and all(p.status.phase == "Running" for p in found) else None

    placed = eventually(running, "2 Running pods")
    for pod in placed:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[nodes.INSTANCE_TYPE_LABEL] == "ml.p5.48xlarge"
        assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
        assert pod.status.pod_ip


def test_job_completes_with_termination_message(api_client: client.ApiClient, namespace: str) -> None:
    message = '{"bytes": 42, "note": "quoted \\"ok\\"\\nsecond line"}'
    client.BatchV1Api(api_client).create_namespaced_job(
        namespace, job("ok", {"sim.warmstart.io/termination-message": message})
    )
    assert eventually(lambda: job_condition(client.BatchV1Api(api_client), namespace, "ok"), "Job end") == "Complete"
    (pod,) = pods(client.CoreV1Api(api_client), namespace, "ok")
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (0, message)


def test_job_pod_fails_with_exit_code_and_message(api_client: client.ApiClient, namespace: str) -> None:
    annotations = {"sim.warmstart.io/exit-code": "3", "sim.warmstart.io/termination-message": "AccessDenied: s3"}
    client.BatchV1Api(api_client).create_namespaced_job(namespace, job("bad", annotations))
    assert eventually(lambda: job_condition(client.BatchV1Api(api_client), namespace, "bad"), "Job end") == "Failed"
    (pod,) = pods(client.CoreV1Api(api_client), namespace, "bad")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (3, "AccessDenied: s3")


def test_duration_hook_delays_job_completion(api_client: client.ApiClient, namespace: str) -> None:
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    batch.create_namespaced_job(namespace, job("slow", {"sim.warmstart.io/duration": "4s"}))
    eventually(lambda: [p for p in pods(core, namespace, "slow") if p.status.phase == "Running"], "Running pod")
    running_seen = time.monotonic()
    assert eventually(lambda: job_condition(batch, namespace, "slow"), "Job end") == "Complete"
    assert time.monotonic() - running_seen > 3.0


def test_daemonset_runs_one_pod_per_selected_node(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    selector = {nodes.INSTANCE_TYPE_LABEL: "ml.g5.24xlarge"}
    matching = core.list_node(label_selector=f"{nodes.INSTANCE_TYPE_LABEL}=ml.g5.24xlarge").items
    # DaemonSet pods tolerate the node.kubernetes.io/* taints, but not those other tests may add.
    wanted = {
        n.metadata.name
        for n in matching
        if not any(not t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or [])
    }
    labels = {"app": "per-node"}
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "per-node"},
        "spec": {"selector": {"matchLabels": labels}, "template": pod_template(labels, nodeSelector=selector)},
    }
    client.AppsV1Api(api_client).create_namespaced_daemon_set(namespace, body)

    def placed() -> list[str] | None:
        found = [p for p in pods(core, namespace, "per-node") if p.status.phase == "Running"]
        return [p.spec.node_name for p in found] if len(found) >= len(wanted) else None

    assert sorted(eventually(placed, f"{len(wanted)} Running DaemonSet pods")) == sorted(wanted)


def test_deleting_owner_collects_dependents(api_client: client.ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    labels = {"app": "owned"}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "owned"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": pod_template(labels)},
    }
    apps.create_namespaced_deployment(namespace, body)
    eventually(lambda: len([p for p in pods(core, namespace, "owned") if p.status.phase == "Running"]) == 2, "pods")
    apps.delete_namespaced_deployment("owned", namespace, propagation_policy="Background")

    def collected() -> bool:
        replica_sets = apps.list_namespaced_replica_set(namespace, label_selector="app=owned").items
        return not replica_sets and not pods(core, namespace, "owned")

    eventually(collected, "the ReplicaSet and its pods to be garbage-collected")


@pytest.mark.parametrize("init", [False, True], ids=["main-container", "init-container"])
def test_image_pull_error_hook(api_client: client.ApiClient, namespace: str, init: bool) -> None:
    core = client.CoreV1Api(api_client)
    image = f"registry.invalid/missing-{uuid.uuid4().hex[:6]}:1"
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}
    if init:
        spec["initContainers"] = [{"name": "preload", "image": image}]
    else:
        spec["containers"][0]["image"] = image
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pull",
            "labels": {"app": "pull"},
            "annotations": {"sim.warmstart.io/image-pull-error": "ErrImagePull"},
        },
        "spec": spec,
    }
    core.create_namespaced_pod(namespace, body)

    def waiting() -> Any:
        status = core.read_namespaced_pod_status("pull", namespace).status
        statuses = (status.init_container_statuses if init else status.container_statuses) or []
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

    state = eventually(waiting, "an image pull error in the pod status")
    assert state.reason == "ErrImagePull"
    assert image in state.message
    version = core.read_namespaced_pod("pull", namespace).metadata.resource_version
    time.sleep(2)  # it must stay that way: not Ready, and not rewritten by the stage again and again
    pod = core.read_namespaced_pod("pull", namespace)
    assert pod.status.phase == "Pending"
    assert not any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    assert pod.metadata.resource_version == version


def test_extra_nodes_come_and_go(api_client: client.ApiClient) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    taint = nodes.Taint("warmstart.io/test", "true")
    names = nodes.create_nodes(api_client, "ml.g5.xlarge=2", taints=[taint], prefix=prefix)
    try:
        eventually(lambda: nodes.ready_nodes(api_client, names) == set(names), "2 extra Ready nodes")
        node = client.CoreV1Api(api_client).read_node(names[0])
        assert node.spec.taints[0].key == "warmstart.io/test"
        assert node.metadata.annotations[nodes.NVME_ANNOTATION] == "250000000000"
    finally:
        nodes.delete_nodes(api_client, names)
