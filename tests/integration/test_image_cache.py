"""The image cache on the real control plane: the real DaemonSet and garbage-collector controllers, kwok pods.

Every test creates its own kwok nodes with a test-unique instance type, so counts are exact on a shared cluster, and
runs the operator in-process restricted to its namespace. Parents are simulated as the endpoint controller's protocol
makes them: the MIC is created with its parentReferences and deleted when the last parent leaves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

import kube
import operating
from nodepool import NodePool
from warmstart.api import API_VERSION, GROUP, VERSION, nodelabels
from warmstart.api.caches import MIC_PLURAL, ModelImageCacheSpec, NodeTargeting
from warmstart.placement import instance_type_affinity
from warmstart.render import daemonsets, keys, labels

pytestmark = pytest.mark.cluster

IMAGE = "vllm/vllm-openai:v0.9.1"
RENDER = {"operator_image": "warmstart:test"}
TIMEOUT = 120.0


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


@contextmanager
def operator(cluster: Any, api: client.ApiClient, namespace: str) -> Iterator[None]:
    """The operator for this namespace; on the way out it deletes every MIC while it can still run the finalizers,
    so the namespace does not hang in Terminating and no label is left on a node."""
    with operating.operator(str(cluster.kubeconfig), [namespace], render=RENDER):
        try:
            yield
        finally:
            custom = client.CustomObjectsApi(api)
            custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, MIC_PLURAL)
            kube.wait_for(
                lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MIC_PLURAL)["items"],
                TIMEOUT,
                what="every MIC finalized",
            )


def mic_manifest(
    namespace: str, instance_type: str, image: str = IMAGE, parents: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A MIC as the endpoint controller makes it: named `image-<key>`, required instance-type affinity."""
    targeting = NodeTargeting(node_affinity=instance_type_affinity([instance_type]))
    name = keys.image_cache_name(keys.image_key(image, targeting))
    spec: dict[str, Any] = {
        "image": image,
        **targeting.to_api(),
        "parentReferences": [
            {"kind": "InferenceEndpointConfig", "name": f"endpoint-{i}", "uid": f"uid-{uuid.uuid4().hex[:8]}"}
            for i in range(parents)
        ],
    }
    if annotations:
        spec["podAnnotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelImageCache",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def get_mic(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get_custom(api, namespace, MIC_PLURAL, name)


def delete_mic(api: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, MIC_PLURAL, name)


def wait_state(api: client.ApiClient, namespace: str, name: str, state: str, **counts: Any) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = (get_mic(api, namespace, name) or {}).get("status") or {}
        wanted = status.get("state") == state and all(status.get(k) == v for k, v in counts.items())
        return status if wanted else None

    return kube.wait_for(probe, TIMEOUT, what=f"MIC {name} {state} {counts}")


def daemonsets_of(api: client.ApiClient, namespace: str) -> list[Any]:
    return list(client.AppsV1Api(api).list_namespaced_daemon_set(namespace, label_selector=labels.MIC_LABEL).items)


def labeled(api: client.ApiClient, key: str) -> set[str]:
    selector = f"{nodelabels.image_ready_label(key)}={nodelabels.READY}"
    return {n.metadata.name for n in client.CoreV1Api(api).list_node(label_selector=selector).items}


def ready_pods(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """node -> pod name of the MIC's Ready pre-pull pods."""
    found = {}
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"{labels.MIC_LABEL}={name}").items:
        if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
            found[pod.spec.node_name] = pod.metadata.name
    return found


def key_of(name: str) -> str:
    return name.removeprefix("image-")


def test_four_target_nodes_get_ready_pods_labels_and_state_ready_others_get_none(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(4)
    _, bystanders = own_nodes.add(2)
    with operator(cluster, api_client, namespace):
        name = kube.create_custom(api_client, mic_manifest(namespace, instance_type))
        status = wait_state(api_client, namespace, name, "Ready", readyNodes=4, targetNodes=4)
        key = key_of(name)
        kube.wait_for(lambda: labeled(api_client, key) == set(targets), TIMEOUT, what="labels on the 4 target nodes")
        assert set(ready_pods(api_client, namespace, name)) == set(targets)
        assert status["key"] == key and status["image"] == IMAGE and status["observedGeneration"] == 1
        assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]
        (ds,) = daemonsets_of(api_client, namespace)
        assert ds.metadata.name == daemonsets.daemonset_name(name)
        assert ds.metadata.owner_references[0].controller and ds.metadata.owner_references[0].name == name
        assert not set(bystanders) & labeled(api_client, key)
        assert not set(bystanders) & set(ready_pods(api_client, namespace, name))
        # the operator made sure the PriorityClass the pods use exists
        priority = client.SchedulingV1Api(api_client).read_priority_class("warmstart-prepull")
        assert priority.value < 0 and priority.preemption_policy == "Never"


def test_shared_cache_keeps_its_parents_and_deletion_removes_daemonset_and_labels(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(3)
    with operator(cluster, api_client, namespace):
        manifest = mic_manifest(namespace, instance_type, parents=2)
        name = kube.create_custom(api_client, manifest)
        wait_state(api_client, namespace, name, "Ready", readyNodes=3, targetNodes=3)
        key = key_of(name)
        kube.wait_for(lambda: labeled(api_client, key) == set(targets), TIMEOUT, what="labels")
        # one parent leaves (the endpoint controller's business): the cache stays, its parents are left alone
        remaining = manifest["spec"]["parentReferences"][1:]
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, MIC_PLURAL, name, {"spec": {"parentReferences": remaining}}
        )
        kube.wait_for(
            lambda: (get_mic(api_client, namespace, name) or {}).get("metadata", {}).get("generation") == 2,
            30,
            what="generation 2",
        )
        wait_state(api_client, namespace, name, "Ready", observedGeneration=2)
        mic = get_mic(api_client, namespace, name) or {}
        assert [p["uid"] for p in mic["spec"]["parentReferences"]] == [p["uid"] for p in remaining]
        assert len(daemonsets_of(api_client, namespace)) == 1 and labeled(api_client, key) == set(targets)
        # the last parent leaves: the endpoint controller deletes the MIC; the finalizer and GC clean up
        delete_mic(api_client, namespace, name)
        kube.wait_for(lambda: get_mic(api_client, namespace, name) is None, TIMEOUT, what="MIC gone")
        kube.wait_for(lambda: not daemonsets_of(api_client, namespace), TIMEOUT, what="DaemonSet gone")
        kube.wait_for(lambda: not labeled(api_client, key), TIMEOUT, what="labels removed")
        kube.wait_for(lambda: not ready_pods(api_client, namespace, name), TIMEOUT, what="pre-pull pods gone")


def test_new_image_gets_its_own_cache_daemonset_and_labels(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    with operator(cluster, api_client, namespace):
        old = kube.create_custom(api_client, mic_manifest(namespace, instance_type))
        wait_state(api_client, namespace, old, "Ready", readyNodes=2, targetNodes=2)
        new = kube.create_custom(api_client, mic_manifest(namespace, instance_type, image="vllm/vllm-openai:v0.9.2"))
        assert new != old
        wait_state(api_client, namespace, new, "Ready", readyNodes=2, targetNodes=2)
        kube.wait_for(lambda: labeled(api_client, key_of(new)) == set(targets), TIMEOUT, what="labels of the new image")
        assert labeled(api_client, key_of(old)) == set(targets)
        assert {d.metadata.name for d in daemonsets_of(api_client, namespace)} == {
            daemonsets.daemonset_name(old),
            daemonsets.daemonset_name(new),
        }
        # the old cache is released after the rollout: only its labels go
        delete_mic(api_client, namespace, old)
        kube.wait_for(lambda: not labeled(api_client, key_of(old)), TIMEOUT, what="old labels removed")
        kube.wait_for(lambda: len(daemonsets_of(api_client, namespace)) == 1, TIMEOUT, what="old DaemonSet gone")
        assert labeled(api_client, key_of(new)) == set(targets)


def test_pull_failure_shows_image_and_node_and_state_failed(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    image = "acme/does-not-exist:1.0"
    hooks = {
        "sim.warmstart.io/image-pull-error": "ErrImagePull",
        "sim.warmstart.io/image-pull-error-container": daemonsets.PULL_CONTAINER,
    }
    with operator(cluster, api_client, namespace):
        name = kube.create_custom(api_client, mic_manifest(namespace, instance_type, image=image, annotations=hooks))
        wait_state(api_client, namespace, name, "Failed", readyNodes=0, targetNodes=2)

        def both_reported() -> dict[str, Any] | None:
            status = (get_mic(api_client, namespace, name) or {}).get("status") or {}
            return status if status.get("state") == "Failed" and len(status.get("failures") or []) == 2 else None

        status = kube.wait_for(both_reported, TIMEOUT, what="both failures reported")
        assert {f["node"] for f in status["failures"]} == set(targets)
        assert {f["reason"] for f in status["failures"]} == {"ErrImagePull"}
        assert all(image in f["message"] for f in status["failures"])
        assert image in status["message"] and "ErrImagePull" in status["message"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and ready["reason"] == "ImagePullFailed"
        assert not labeled(api_client, key_of(name))


def test_operator_restart_keeps_one_daemonset_and_converges(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    kubeconfig = str(cluster.kubeconfig)
    with operating.operator(kubeconfig, [namespace], render=RENDER):
        name = kube.create_custom(api_client, mic_manifest(namespace, instance_type))
        wait_state(api_client, namespace, name, "Ready", readyNodes=2, targetNodes=2)
        (before,) = daemonsets_of(api_client, namespace)
    # while the operator is down a node joins the targeting
    _, joined = own_nodes.add(1, start=2, instance_type=instance_type)
    with operating.operator(kubeconfig, [namespace], render=RENDER):
        wait_state(api_client, namespace, name, "Ready", readyNodes=3, targetNodes=3)
        kube.wait_for(
            lambda: labeled(api_client, key_of(name)) == set(targets + joined), TIMEOUT, what="label on the new node"
        )
        (after,) = daemonsets_of(api_client, namespace)
        assert after.metadata.uid == before.metadata.uid
    with operator(cluster, api_client, namespace):
        wait_state(api_client, namespace, name, "Ready", readyNodes=3, targetNodes=3)
        assert len(daemonsets_of(api_client, namespace)) == 1


def test_tainted_gpu_nodes_are_pre_pulled_only_when_tolerating_all_taints(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2, tainted=True)
    with operator(cluster, api_client, namespace):
        tolerant = kube.create_custom(api_client, mic_manifest(namespace, instance_type))
        wait_state(api_client, namespace, tolerant, "Ready", readyNodes=2, targetNodes=2)
        kube.wait_for(
            lambda: labeled(api_client, key_of(tolerant)) == set(targets), TIMEOUT, what="labels on tainted nodes"
        )
        strict = mic_manifest(namespace, instance_type, image="vllm/vllm-openai:v0.9.2")
        strict["spec"]["tolerateAllTaints"] = False
        strict["metadata"]["name"] = "strict-cache"
        kube.create_custom(api_client, strict)
        wait_state(
            api_client, namespace, "strict-cache", "Pending", targetNodes=0, message="no node matches the targeting"
        )
        assert not labeled(
            api_client, daemonsets.cache_key("strict-cache", ModelImageCacheSpec.model_validate(strict["spec"]))
        )
