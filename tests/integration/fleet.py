"""Helpers of the fleet tests: weights caches of distinct sources, and kwok nodes that go NotReady, unreachable or
come back (kwok keeps a node Ready only while it carries kwok's annotation)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

import kube
from warmstart.api import API_VERSION, GROUP, VERSION, nodelabels
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL
from warmstart.api.sources import ModelSourceConfig
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.placement import GB, instance_type_affinity
from warmstart.render import jobs, keys, labels

TIMEOUT = 120.0
DOWNLOADED = {
    "outcome": "Succeeded",
    "reason": "Downloaded",
    "message": "ok",
    "bytes": 16 * GB,
    "seconds": 1.5,
    "files": 7,
    "retryable": False,
}


def render(duration: str = "1s", **settings: Any) -> dict[str, Any]:
    annotations = {
        "sim.warmstart.io/duration": duration,
        "sim.warmstart.io/termination-message": json.dumps(DOWNLOADED),
    }
    return {"operator_image": "warmstart:test", "preload_pod_annotations": annotations, **settings}


def source(location: str = "models/llama") -> dict[str, Any]:
    return {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
        "modelLocation": location,
    }


def mdcc(namespace: str, instance_types: list[str], location: str = "models/llama", **spec: Any) -> dict[str, Any]:
    """An MDCC named as the endpoint controller names it, with a required instance-type affinity."""
    wanted = source(location)
    key = keys.weights_key_in(ModelSourceConfig.model_validate(wanted), "/opt/dlami/nvme", namespace, {})
    body = {"modelSourceConfig": wanted, "nodeAffinity": instance_type_affinity(instance_types).to_api(), **spec}
    return {
        "apiVersion": API_VERSION,
        "kind": MDCC_KIND,
        "metadata": {"name": keys.weights_cache_name(key), "namespace": namespace},
        "spec": body,
    }


def status_of(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return (kube.get_custom(api, namespace, MDCC_PLURAL, name) or {}).get("status") or {}


def wait_status(api: client.ApiClient, namespace: str, name: str, what: str, **fields: Any) -> dict[str, Any]:
    """Wait until every given status field has the given value."""

    def probe() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        return status if all(status.get(k) == v for k, v in fields.items()) else None

    return kube.wait_for(probe, TIMEOUT, what=f"MDCC {name}: {what} {fields}")


def labeled(api: client.ApiClient, name: str) -> set[str]:
    selector = f"{nodelabels.weights_ready_label(name.removeprefix('weights-'))}={nodelabels.READY}"
    return {n.metadata.name for n in client.CoreV1Api(api).list_node(label_selector=selector).items}


def preload_jobs(api: client.ApiClient, namespace: str, role: str = jobs.ROLE_PRELOAD) -> list[Any]:
    selector = f"{labels.MDCC_LABEL},{labels.ROLE_LABEL}={role}"
    return list(client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector).items)


def job_nodes(api: client.ApiClient, namespace: str, role: str = jobs.ROLE_PRELOAD) -> list[str]:
    return sorted(j.metadata.labels[labels.NODE_LABEL] for j in preload_jobs(api, namespace, role))


def set_ready(api: client.ApiClient, node: str, status: str) -> None:
    """Take a node from kwok (it would mark it Ready again) and report its Ready condition as `status`
    ("False": NotReady, "Unknown": unreachable); the node-lifecycle controller then taints it as it would a real one."""
    core = client.CoreV1Api(api)
    core.patch_node(node, {"metadata": {"annotations": {kwok_nodes.KWOK_ANNOTATION: "gone"}}})
    reason = "NodeStatusUnknown" if status == "Unknown" else "KubeletNotReady"
    condition = {"type": "Ready", "status": status, "reason": reason, "message": "fleet test"}
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def give_back(api: client.ApiClient, node: str) -> None:
    """Hand a node back to kwok, which marks it Ready."""
    client.CoreV1Api(api).patch_node(node, {"metadata": {"annotations": {kwok_nodes.KWOK_ANNOTATION: "fake"}}})
    kube.wait_for(lambda: kwok_nodes.ready_nodes(api, [node]) == {node}, TIMEOUT, what=f"{node} Ready again")


def unavailable(status: dict[str, Any]) -> dict[str, str]:
    return {u["node"]: u["reason"] for u in status.get("unavailableNodes") or []}


def delete_all(api: client.ApiClient, namespace: str) -> None:
    """Delete every MDCC in the namespace and wait until the finalizer released them (the operator must run)."""
    custom = client.CustomObjectsApi(api)
    for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL, item["metadata"]["name"])
    kube.wait_for(
        lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, MDCC_PLURAL)["items"],
        TIMEOUT,
        what="caches released",
    )
