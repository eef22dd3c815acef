"""The router before an endpoint: its ConfigMap (strategy and knobs), Deployment, Service and least-privilege RBAC."""

from __future__ import annotations

from typing import Any

import yaml

from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.render import labels, names, owners, security
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

ROUTER_PORT = 8080
ROUTER_METRICS_PORT_NAME = "http"


def name(endpoint_name: str) -> str:
    """`<endpoint>-router`, hash-shortened when that is not a DNS-1035 label (the router Service needs one)."""
    return names.child_name(endpoint_name, "-router")


def config(endpoint: Endpoint) -> RouterConfig:
    """The router configuration rendered from the endpoint spec."""
    limits = endpoint.worker.request_limits
    knobs: dict[str, Any] = {"strategy": endpoint.routing_strategy.value}
    if limits and limits.max_concurrent_requests:
        knobs["maxConcurrentRequests"] = limits.max_concurrent_requests
    return RouterConfig.model_validate(knobs)


def _meta(endpoint: Endpoint, extra: dict[str, str] | None = None) -> Manifest:
    ref = endpoint.ref
    return {
        "name": name(ref.name),
        "namespace": ref.namespace,
        "labels": labels.managed(
            {labels.COMPONENT: "router", labels.ENDPOINT_LABEL: endpoint.label_value, **(extra or {})}
        ),
        "ownerReferences": [owners.owner_reference(ref.kind, ref.name, ref.uid, controller=True)],
    }


def configmap(endpoint: Endpoint) -> Manifest:
    """Only the knobs the endpoint sets; every other knob keeps the router's documented default."""
    chosen = config(endpoint).model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(endpoint),
        "data": {CONFIGMAP_KEY: yaml.safe_dump(chosen, sort_keys=True)},
    }


def service_account(endpoint: Endpoint) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(endpoint),
        "automountServiceAccountToken": True,
    }


def role(endpoint: Endpoint) -> Manifest:
    """Read the model Service's EndpointSlices and this router's ConfigMap; nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(endpoint),
        "rules": [
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [name(endpoint.ref.name)],
                "verbs": ["get", "list", "watch"],
            },
        ],
    }


def role_binding(endpoint: Endpoint) -> Manifest:
    router = name(endpoint.ref.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(endpoint),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": router},
        "subjects": [{"kind": "ServiceAccount", "name": router, "namespace": endpoint.ref.namespace}],
    }


def deployment(endpoint: Endpoint, context: RenderContext) -> Manifest:
    router = name(endpoint.ref.name)
    selector = {labels.COMPONENT: "router", labels.ENDPOINT_LABEL: endpoint.label_value}
    container = {
        "name": "router",
        "image": context.operator_image,
        "imagePullPolicy": context.image_pull_policy,
        "args": [
            "router",
            "--namespace",
            endpoint.ref.namespace,
            "--service",
            endpoint.child_name,
            "--configmap",
            router,
            "--port",
            str(ROUTER_PORT),
            "--port-name",
            endpoint.worker.model_invocation_port.name,
        ],
        "ports": [{"name": ROUTER_METRICS_PORT_NAME, "containerPort": ROUTER_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": ROUTER_PORT}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health", "port": ROUTER_PORT}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": dict(security.RESTRICTED),
    }
    pod_spec: Manifest = {
        "serviceAccountName": router,
        "containers": [container],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if context.router_node_selector:
        pod_spec["nodeSelector"] = dict(context.router_node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(endpoint),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**labels.managed(), **selector}},
                "spec": pod_spec,
            },
        },
    }


def service(endpoint: Endpoint) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(endpoint),
        "spec": {
            "selector": {labels.COMPONENT: "router", labels.ENDPOINT_LABEL: endpoint.label_value},
            "ports": [
                {
                    "name": "http",
                    "port": endpoint.worker.model_invocation_port.container_port,
                    "targetPort": ROUTER_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def manifests(endpoint: Endpoint, context: RenderContext) -> list[Manifest]:
    """Everything the router needs, in apply order."""
    return [
        configmap(endpoint),
        service_account(endpoint),
        role(endpoint),
        role_binding(endpoint),
        deployment(endpoint, context),
        service(endpoint),
    ]


#: (apiVersion, kind) of every router object, for removal
KINDS = [
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
]
