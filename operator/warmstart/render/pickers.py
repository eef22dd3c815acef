"""Gateway mode: the InferencePool a user's gateway routes to, and warmstart's endpoint picker that it asks.

The picker is the router in `--mode epp` (Envoy ext_proc over gRPC): it follows the same ConfigMap knobs and the
same `<endpoint>-models` EndpointSlices as the proxy, and reuses the proxy's pieces (`render/router.py`) under its own
name, `<endpoint>-epp`. Several picker pods elect a leader through the Lease of that name and only the leader is
ready, so the picker Service (and the gateway behind it) reaches one picker at a time: GIE's active-passive default.
The endpoint's own Service keeps pointing straight at the model pods.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from warmstart.api.gateways import (
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    EndpointPickerSpec,
)
from warmstart.render import deployments, names, router
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint
from warmstart.render.router import PICKER

Manifest = dict[str, Any]

#: the picker's gRPC port (ext_proc and gRPC health): GIE's default, which gateways assume when a pool names none
GRPC_PORT = 9002
GRPC_PORT_NAME = "grpc"
#: gRPC health service names a probe asks (GIE's EPP protocol)
READINESS_SERVICE = "readiness"
LIVENESS_SERVICE = "liveness"
LEASE_API_VERSION = "coordination.k8s.io/v1"
#: the pod's own name, its identity in the Lease
POD_NAME_ENV = "POD_NAME"


def name(endpoint_name: str) -> str:
    """`<endpoint>-epp`: the picker's Deployment, Service, ConfigMap, RBAC, budget and Lease."""
    return router.name(endpoint_name, PICKER)


def pool_name(endpoint_name: str) -> str:
    """The InferencePool's name: the endpoint's child name, what an HTTPRoute's backendRef names."""
    return names.child_name(endpoint_name)


def spec_of(endpoint: Endpoint) -> EndpointPickerSpec:
    """The endpoint's picker setting (only called in gateway mode)."""
    chosen = endpoint.endpoint_picker
    if chosen is None:
        raise ValueError(f"{endpoint.ref.name} is not in gateway mode")
    return chosen


def inference_pool(endpoint: Endpoint) -> Manifest:
    """The pool of the model pods (their Deployment's selector, the invocation port) and its picker's Service."""
    meta = router.metadata(endpoint, PICKER)
    meta["name"] = pool_name(endpoint.ref.name)
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": deployments.pod_selector(endpoint)},
            "targetPorts": [{"number": endpoint.worker.model_invocation_port.container_port}],
            "endpointPickerRef": {
                "kind": "Service",
                "name": name(endpoint.ref.name),
                "port": {"number": GRPC_PORT},
                "failureMode": spec_of(endpoint).failure_mode.value,
            },
        },
    }


def lease(endpoint: Endpoint) -> Manifest:
    """The Lease the picker pods elect their leader through. The operator owns only its metadata (so it goes with
    the endpoint or the setting); the pods write its spec."""
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": router.metadata(endpoint, PICKER)}


def role(endpoint: Endpoint) -> Manifest:
    """The proxy's rights (EndpointSlices, its ConfigMap) plus reading and renewing its own Lease, nothing else."""
    own_lease = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [name(endpoint.ref.name)],
        "verbs": ["get", "update"],
    }
    return router.role(endpoint, PICKER, [own_lease])


def deployment(endpoint: Endpoint, context: RenderContext) -> Manifest:
    """The picker pods, probed over gRPC health (ready = the Lease's leader).

    They roll out with every old pod replaceable at once (maxUnavailable 100%): only one pod is ever ready, so a
    rollout that waited for a new pod to be ready before stopping the old leader would never end. The surge starts
    the new pods first; the stopping leader gives up its Lease, and a new pod takes over within a retry period.
    """
    picker = name(endpoint.ref.name)
    container: Manifest = {
        "name": "picker",
        "args": [
            "router",
            "--mode",
            "epp",
            *router.discovery_args(endpoint, PICKER),
            "--grpc-port",
            str(GRPC_PORT),
            "--admin-port",
            str(router.ROUTER_ADMIN_PORT),
            "--port-name",
            endpoint.worker.model_invocation_port.name,
            "--lease",
            picker,
            "--lease-identity",
            f"$({POD_NAME_ENV})",
        ],
        "env": [{"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [
            {"name": GRPC_PORT_NAME, "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": router.ROUTER_ADMIN_PORT_NAME, "containerPort": router.ROUTER_ADMIN_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"grpc": {"port": GRPC_PORT, "service": READINESS_SERVICE}, "periodSeconds": 2},
        "livenessProbe": {"grpc": {"port": GRPC_PORT, "service": LIVENESS_SERVICE}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%", "maxSurge": "100%"}}
    return router.workload_deployment(endpoint, context, PICKER, container, rolling)


def service(endpoint: Endpoint) -> Manifest:
    """The Service the pool's endpointPickerRef names: gRPC over cleartext HTTP/2 to the ready (leader) picker."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": router.metadata(endpoint, PICKER),
        "spec": {
            "selector": router.pod_selector(endpoint, PICKER),
            "ports": [
                {
                    "name": GRPC_PORT_NAME,
                    "port": GRPC_PORT,
                    "targetPort": GRPC_PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                }
            ],
        },
    }


def disruption_budget(endpoint: Endpoint) -> Manifest:
    """Every picker pod may be evicted: standbys are unready by design, and the leader's eviction is a failover (a
    budget counting ready pods would block every drain of the leader's node)."""
    return router.disruption_budget(endpoint, PICKER, max_unavailable="100%")


def manifests(
    endpoint: Endpoint, context: RenderContext, warm_nodes: Iterable[str] | None, pool: bool
) -> list[Manifest]:
    """Everything gateway mode needs, in apply order; `pool` False leaves out the InferencePool (its CRD is not
    installed: the picker and the model pods still run)."""
    wanted = [
        router.configmap(endpoint, warm_nodes, PICKER),
        router.service_account(endpoint, PICKER),
        lease(endpoint),
        role(endpoint),
        router.role_binding(endpoint, PICKER),
        router.models_service(endpoint),
        router.network_policy(endpoint, context, PICKER, traffic_port=GRPC_PORT),
        service(endpoint),
        deployment(endpoint, context),
        disruption_budget(endpoint),
    ]
    if pool:
        wanted.append(inference_pool(endpoint))
    return wanted


def objects(endpoint_name: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every gateway-mode object, for removal (`<endpoint>-models` is the proxy's too)."""
    picker = name(endpoint_name)
    return [
        (INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND, pool_name(endpoint_name)),
        ("apps/v1", "Deployment", picker),
        ("policy/v1", "PodDisruptionBudget", picker),
        ("networking.k8s.io/v1", "NetworkPolicy", picker),
        ("v1", "Service", picker),
        ("v1", "Service", router.models_service_name(endpoint_name)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", picker),
        ("rbac.authorization.k8s.io/v1", "Role", picker),
        (LEASE_API_VERSION, "Lease", picker),
        ("v1", "ServiceAccount", picker),
        ("v1", "ConfigMap", picker),
    ]
