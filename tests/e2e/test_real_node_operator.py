"""The chart on the real node: the operator pod runs from the project image, passes its probes and reconciles, and
its pre-pull DaemonSet really pulls an image without a shell from the local registry."""

from __future__ import annotations

import pytest
from kubernetes import client

import realstack
from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MIC_PLURAL

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


def test_operator_pod_runs_on_the_real_node_from_the_project_image_and_passes_its_probes(
    real_stack: realstack.Stack, real_core: client.CoreV1Api
) -> None:
    apps = client.AppsV1Api(real_stack.api)
    realstack.eventually(
        lambda: (
            (apps.read_namespaced_deployment(real_stack.deployment, real_stack.namespace).status.ready_replicas or 0)
            >= 1
        ),
        "the operator Deployment to have a Ready replica (its readiness probe is /healthz)",
        explain=real_stack.describe,
    )
    (pod,) = [
        p
        for p in real_core.list_namespaced_pod(real_stack.namespace).items
        if p.metadata.name.startswith(real_stack.deployment) and p.metadata.deletion_timestamp is None
    ]
    assert pod.spec.node_name == real_stack.node
    (status,) = pod.status.container_statuses
    assert status.ready and status.state.running is not None
    assert status.restart_count == 0, real_stack.operator_log()
    assert status.image == real_stack.image or status.image.endswith(real_stack.image.split("/", 1)[1])
    assert status.container_id.startswith("containerd://")


def test_prepull_daemonset_pulls_an_image_without_a_shell_and_the_cache_becomes_ready(
    real_stack: realstack.Stack, real_core: client.CoreV1Api
) -> None:
    """The reconcile loop end to end: a ModelImageCache for the shell-less image turns Ready on the real node."""
    name = "shellless"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelImageCache",
        "metadata": {"name": name, "namespace": real_stack.namespace},
        "spec": {"image": real_stack.shellless_image, "nodeSelector": realstack.REAL_SELECTOR},
    }
    objects = client.CustomObjectsApi(real_stack.api)
    objects.create_namespaced_custom_object(GROUP, VERSION, real_stack.namespace, MIC_PLURAL, body)
    try:

        def ready() -> dict[str, object] | None:
            mic = objects.get_namespaced_custom_object(GROUP, VERSION, real_stack.namespace, MIC_PLURAL, name)
            status = mic.get("status") or {}
            return status if status.get("state") == "Ready" else None

        status = realstack.eventually(ready, "the shell-less image cache to be Ready", explain=real_stack.describe)
        assert status.get("readyNodes") == 1 and status.get("targetNodes") == 1, status
        pods = [
            p
            for p in real_core.list_namespaced_pod(real_stack.namespace).items
            if any(c.image == real_stack.shellless_image for c in p.spec.init_containers or [])
        ]
        assert [p.spec.node_name for p in pods] == [real_stack.node]
        pulled = {s.name: s for s in pods[0].status.init_container_statuses}
        (pull,) = [s for s in pulled.values() if s.image.endswith(real_stack.shellless_image.split("/", 1)[1])]
        assert pull.state.terminated is not None and pull.state.terminated.exit_code == 0, pull
        assert pull.image_id, "the kubelet reports the pulled image's digest"
    finally:
        objects.delete_namespaced_custom_object(GROUP, VERSION, real_stack.namespace, MIC_PLURAL, name)
