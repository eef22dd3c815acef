"""Helpers for endpoint tests: unique kwok nodes, reading endpoint status, and counting pods per node."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client

import kube
from nodepool import NodePool

GROUP, VERSION = "inference.sagemaker.aws.amazon.com", "v1"


@contextmanager
def own_nodes(
    api: client.ApiClient,
    count: int,
    *,
    gpus: int = 8,
    nvme_bytes: int = 3_800_000_000_000,
    instance_type: str | None = None,
) -> Iterator[tuple[str, list[str]]]:
    """`count` fresh kwok nodes of a test-unique instance type; yields (instance type, names); deletes them after."""
    pool = NodePool(api, prefix="it")
    try:
        yield pool.add(count, instance_type=instance_type, gpus=gpus, nvme=nvme_bytes)
    finally:
        pool.delete_all()


def endpoint(
    api: client.ApiClient, namespace: str, name: str, plural: str = "inferenceendpointconfigs"
) -> dict[str, Any] | None:
    return kube.get_custom(api, namespace, plural, name)


def status(
    api: client.ApiClient, namespace: str, name: str, plural: str = "inferenceendpointconfigs"
) -> dict[str, Any]:
    body = endpoint(api, namespace, name, plural)
    return dict((body or {}).get("status") or {})


def condition(status_: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status_.get("conditions") or [] if c["type"] == type_), {})


def caches(api: client.ApiClient, namespace: str, plural: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural
    )["items"]
    return items


def running_pods_by_node(api: client.ApiClient, namespace: str, selector: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None:
            counts[pod.spec.node_name] = counts.get(pod.spec.node_name, 0) + 1
    return counts


def endpoint_manifest(name: str, namespace: str, instance_type: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceEndpointConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "modelName": name,
            "modelSourceConfig": {
                "modelSourceType": "s3",
                "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
                "modelLocation": f"models/{name}",
            },
            "modelCacheConfig": {"weightsCache": {"enabled": True}, "imageCache": {"enabled": True}},
            "instanceType": instance_type,
            "worker": {
                "image": "vllm/vllm-openai:v0.11.0",
                "modelInvocationPort": {"containerPort": 8000},
                "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
                "resources": {"limits": {"nvidia.com/gpu": "4"}},
            },
        },
    }
    body["spec"].update(spec)
    return body
