"""A GIE-style gateway as a user would run it in the cluster: Envoy in a pod, on a bootstrap in a ConfigMap, behind a
Service.

The objects are the user's, not the operator's: a ConfigMap holding the bootstrap that `envoy_gateway.bootstrap`
renders, a Deployment running the project image's `envoy` (`/opt/warmstart/bin/envoy`, from the `gateway` extra) on
it, and a ClusterIP Service in front. The pod runs as non-root with a read-only root filesystem, no capabilities and
no service account token; its readiness probe opens the listener's port (the admin interface is on loopback only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from kubernetes import client

from warmstart.render import envoy_gateway
from warmstart.render.envoy_gateway import GatewaySpec

CONFIG_PATH = "/etc/envoy"
SERVICE_PORT = 80
NON_ROOT = 65532


def config_map(name: str, namespace: str, spec: GatewaySpec) -> dict[str, Any]:
    """The bootstrap, as `envoy.yaml`."""
    bootstrap = yaml.safe_dump(envoy_gateway.bootstrap(spec))
    return {"metadata": {"name": name, "namespace": namespace}, "data": {"envoy.yaml": bootstrap}}


def deployment(
    name: str, namespace: str, image: str, spec: GatewaySpec, node_selector: Mapping[str, str]
) -> dict[str, Any]:
    """One Envoy replica on the ConfigMap `name`, listening on `spec.listen.port`."""
    labels = {"app.kubernetes.io/name": name}
    container = {
        "name": "envoy",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["envoy"],
        "args": [
            "-c",
            f"{CONFIG_PATH}/envoy.yaml",
            "--disable-hot-restart",
            "--concurrency",
            "1",
            "-l",
            "warning",
        ],
        "ports": [{"name": "http", "containerPort": spec.listen.port}],
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 2, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT,
            "runAsGroup": NON_ROOT,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "bootstrap", "mountPath": CONFIG_PATH, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod = {
        "metadata": {"labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "nodeSelector": dict(node_selector),
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": [
                {"name": "bootstrap", "configMap": {"name": name}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
            ],
        },
    }
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod},
    }


def service(name: str, namespace: str) -> dict[str, Any]:
    """The gateway's Service: port 80 to the listener."""
    labels = {"app.kubernetes.io/name": name}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def create(
    api: client.ApiClient, name: str, namespace: str, image: str, spec: GatewaySpec, node_selector: Mapping[str, str]
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_config_map(namespace, config_map(name, namespace, spec))
    core.create_namespaced_service(namespace, service(name, namespace))
    apps.create_namespaced_deployment(namespace, deployment(name, namespace, image, spec, node_selector))


def delete(api: client.ApiClient, name: str, namespace: str) -> None:
    """Remove the three objects (the pod goes with its Deployment); what is already gone is skipped."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    removals = (
        lambda: apps.delete_namespaced_deployment(name, namespace, propagation_policy="Foreground"),
        lambda: core.delete_namespaced_service(name, namespace),
        lambda: core.delete_namespaced_config_map(name, namespace),
    )
    for remove in removals:
        try:
            remove()
        except client.ApiException as error:
            if error.status != 404:
                raise
