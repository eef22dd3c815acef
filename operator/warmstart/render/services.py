"""The Service clients call for an endpoint: to its router pods while a router serves, else to its model pods.

It keeps the endpoint's child name, port number and port name in both modes, so clients never change address; only
its selector and target port move. The reconcile decides which (`via_router`): the router only once a router pod is
ready, and back to the model pods before the router is removed (controllers/endpoint_facts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warmstart.render import deployments, labels, owners, router
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]


def client_service(endpoint: Endpoint, *, via_router: bool) -> Manifest:
    """The endpoint's Service on the invocation port; `via_router` sends it to the router pods' traffic port."""
    port = endpoint.worker.model_invocation_port
    selector = router.pod_selector(endpoint) if via_router else deployments.pod_selector(endpoint)
    target: int | str = router.ROUTER_PORT if via_router else port.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": endpoint.child_name,
            "namespace": endpoint.ref.namespace,
            "labels": {**labels.managed({labels.COMPONENT: "model-server"}), **deployments.pod_selector(endpoint)},
            "ownerReferences": [
                owners.owner_reference(endpoint.ref.kind, endpoint.ref.name, endpoint.ref.uid, controller=True)
            ],
        },
        "spec": {
            "selector": selector,
            "ports": [{"name": port.name, "port": port.container_port, "targetPort": target, "protocol": "TCP"}],
        },
    }


def selects_router(service: Mapping[str, Any] | None, endpoint: Endpoint) -> bool:
    """Whether a stored client Service currently sends traffic to the endpoint's router pods."""
    if service is None:
        return False
    return dict((service.get("spec") or {}).get("selector") or {}) == router.pod_selector(endpoint)


def router_available(router_deployment: Mapping[str, Any] | None) -> bool:
    """Whether the router Deployment has a pod that is ready (available): only then may clients be sent to it."""
    if router_deployment is None:
        return False
    return int((router_deployment.get("status") or {}).get("availableReplicas") or 0) >= 1
