"""What the API must say about real nodes: the kubelets' RBAC, the HyperPod-like NVMe annotation and GPU capacity.

- The apiserver authorizes with RBAC only (no Node authorizer), so group ``system:nodes`` is bound
  to the ``system:node`` ClusterRole, as clusters without the Node authorizer used to do.
- The kubelet registers the instance-type label itself (``--node-labels``); the NVMe annotation the
  kwok nodes carry is patched on.
- ``nvidia.com/gpu`` is advertised as an extended resource by patching ``status.capacity``
  (https://kubernetes.io/docs/tasks/administer-cluster/extended-resource-node/); the kubelet then
  copies it to ``allocatable``. A kubelet that restarts may reset extended resources to 0, so
  :func:`advertise` checks and patches again until allocatable shows the count.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warmstart.localcluster import nodes

NODES_BINDING = "warmstart:system:nodes"
GPU_RESOURCE = "nvidia.com/gpu"


def nodes_binding() -> dict[str, Any]:
    """The ClusterRoleBinding that lets every kubelet act as a node."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NODES_BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }


def bind_nodes(api: client.ApiClient) -> None:
    try:
        client.RbacAuthorizationV1Api(api).create_cluster_role_binding(nodes_binding())
    except ApiException as error:
        if error.status != 409:
            raise


def gpu_count(instance_type: str) -> int:
    return nodes.INSTANCE_TYPES.get(instance_type, nodes.DEFAULT_INSTANCE).gpus


def node_annotations(instance_type: str) -> dict[str, str]:
    shape = nodes.INSTANCE_TYPES.get(instance_type, nodes.DEFAULT_INSTANCE)
    return {nodes.NVME_ANNOTATION: str(shape.nvme_bytes)}


def capacity_patch(gpus: int) -> list[dict[str, Any]]:
    """The JSON patch that adds ``nvidia.com/gpu`` to ``status.capacity`` (``/`` escaped as ``~1``)."""
    return [{"op": "add", "path": "/status/capacity/" + GPU_RESOURCE.replace("/", "~1"), "value": str(gpus)}]


def advertise(api: client.ApiClient, name: str, instance_type: str, timeout: float = 60.0) -> None:
    """Annotate node ``name`` and advertise its GPUs; return once ``allocatable`` shows them."""
    core = client.CoreV1Api(api)
    core.patch_node(name, {"metadata": {"annotations": node_annotations(instance_type)}})
    gpus = gpu_count(instance_type)
    if not gpus:
        return
    deadline = time.monotonic() + timeout
    while True:
        status = core.read_node_status(name).status
        if (status.capacity or {}).get(GPU_RESOURCE) != str(gpus):
            core.patch_node_status(name, capacity_patch(gpus))
        elif (status.allocatable or {}).get(GPU_RESOURCE) == str(gpus):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {name}: allocatable {GPU_RESOURCE} not {gpus} after {timeout:.0f} s")
        time.sleep(1.0)


def ready(api: client.ApiClient, name: str) -> bool:
    """Whether node ``name`` exists, is Ready and carries none of the ``node.kubernetes.io/*`` taints."""
    try:
        node = client.CoreV1Api(api).read_node(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    if any(taint.key.startswith("node.kubernetes.io/") for taint in node.spec.taints or []):
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
