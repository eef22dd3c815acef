"""The router before an endpoint: its ConfigMap (strategy, knobs, warm nodes), Deployment and its disruption budget,
the model pods' headless Service it follows, least-privilege RBAC, and a NetworkPolicy that opens its traffic port to
clients and its admin port only to the peers the admin lists.

Router replicas share their picks and in-flight counts (`router/peersync.py`): they find each other through the
headless Service `<endpoint>-router` (its EndpointSlices list the router pods on the sync port), authenticate every
message with the key in the Secret `<endpoint>-router-sync` (mounted by the router pods alone), and the NetworkPolicy
admits only this endpoint's router pods to the sync port.

Gateway mode's endpoint picker (`render/pickers.py`) is the same program in another mode: it reuses these pieces
under its own name and labels (a :class:`Workload`).

Clients reach the router through the endpoint's own Service (`render/services.py` points it here once a router pod is
ready); the router reaches the model pods through the EndpointSlices of `<endpoint>-models`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from warmstart.api import preloading
from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.api.sources import ModelSourceType
from warmstart.render import deployments, labels, names, owners, preload_containers, security
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

ROUTER_PORT = 8080
ROUTER_PORT_NAME = "http"
#: /metrics and /router/status: on the pod only, never in the router's Service
ROUTER_ADMIN_PORT = 9090
ROUTER_ADMIN_PORT_NAME = "admin"
#: router-to-router sync (picks and in-flight counts): open only to the endpoint's own router pods
ROUTER_SYNC_PORT = 9091
ROUTER_SYNC_PORT_NAME = "sync"
#: the Secret key holding the endpoint's sync key, and where router pods mount it
SYNC_KEY = "key"
SYNC_ROOT = "/var/run/warmstart-sync"
SYNC_VOLUME = "warmstart-sync"
#: seconds a stopping router pod keeps serving, so kube-proxy stops sending it connections before it closes
DRAIN_SECONDS = 5
#: where router replicas spread (best effort: ScheduleAnyway)
SPREAD_TOPOLOGY_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
#: a router pod's own copy of the model's tokenizer files (an emptyDir its init container fills)
TOKENIZER_ROOT = "/var/run/warmstart-tokenizer"
TOKENIZER_VOLUME = "warmstart-tokenizer"
TOKENIZER_CONTAINER = "warmstart-tokenizer"
#: sources a router pod fetches from over the network; a mounted source (FSx, a claim) stays with the model pods
_FETCHED_SOURCES = (ModelSourceType.S3, ModelSourceType.HUGGINGFACE)


@dataclass(frozen=True)
class Workload:
    """One of the two ways the router runs for an endpoint: its objects' name suffix and its pods' component label."""

    component: str
    suffix: str


#: the proxy in front of the model pods (clients call it through the endpoint's Service)
PROXY = Workload("router", "-router")
#: the Gateway API Inference Extension endpoint picker (the user's gateway asks it; render/pickers.py)
PICKER = Workload("endpoint-picker", "-epp")


def name(endpoint_name: str, workload: Workload = PROXY) -> str:
    """`<endpoint>-router` (`-epp` for the picker), hash-shortened when that is not a DNS-1035 label (its Service
    needs one)."""
    return names.child_name(endpoint_name, workload.suffix)


def sync_secret_name(endpoint_name: str) -> str:
    """`<endpoint>-router-sync`: the Secret holding the key router replicas authenticate their sync messages with."""
    return names.child_name(endpoint_name, "-router-sync")


def models_service_name(endpoint_name: str) -> str:
    """`<endpoint>-models`: the model pods' headless Service, whose EndpointSlices the router follows."""
    return names.child_name(endpoint_name, "-models")


def pod_selector(endpoint: Endpoint, workload: Workload = PROXY) -> dict[str, str]:
    """The labels of this endpoint's router (or picker) pods."""
    return {labels.COMPONENT: workload.component, labels.ENDPOINT_LABEL: endpoint.label_value}


def replicas(endpoint: Endpoint, context: RenderContext) -> int:
    """Router pods: the endpoint's `routerReplicas`, else the operator's default."""
    chosen = endpoint.routing.router_replicas if endpoint.routing else None
    return chosen if chosen is not None else context.router_replicas


def config(
    endpoint: Endpoint, warm_nodes: Iterable[str] | None = None, trusted_proxies: Sequence[str] = ()
) -> RouterConfig:
    """The router configuration rendered from the endpoint spec and, with a weights cache, its warm nodes; the
    admin's `trusted_proxies` (the chart's `router.trustedProxies`) last, so no endpoint sets them."""
    limits = endpoint.worker.request_limits
    knobs: dict[str, Any] = {"strategy": endpoint.routing_strategy.value}
    if endpoint.routing and endpoint.routing.router_config:
        knobs.update(endpoint.routing.router_config.chosen())
    if trusted_proxies:
        knobs["trustedProxies"] = list(trusted_proxies)
    if warm_nodes is not None:
        knobs["warmNodes"] = sorted(set(warm_nodes))
    if limits and limits.max_concurrent_requests:
        knobs["maxConcurrentRequests"] = limits.max_concurrent_requests
    if limits and limits.max_queue_size is not None:
        knobs["maxQueueSize"] = limits.max_queue_size
    if limits and limits.overflow_status_code is not None:
        knobs["overflowStatusCode"] = limits.overflow_status_code
    if fetches_tokenizer(endpoint):
        knobs["tokenizerDir"] = preloading.tokenizer_dir(TOKENIZER_ROOT)
    return RouterConfig.model_validate(knobs)


def fetches_tokenizer(endpoint: Endpoint) -> bool:
    """Whether router pods fetch the model's tokenizer files themselves: the router follows KV events and the model
    comes from S3 or the Hub."""
    chosen = endpoint.routing.router_config if endpoint.routing else None
    return bool(chosen and chosen.kv_events) and endpoint.source.model_source_type in _FETCHED_SOURCES


def _tokenizer_fetch(endpoint: Endpoint, context: RenderContext) -> tuple[Manifest, list[Manifest], Manifest]:
    """The init container that copies the model's tokenizer files from its source into the pod's emptyDir (exit 0
    even when it cannot: the router then routes by request text), the pod's volumes, and the router's read-only
    mount of the files."""
    cache = preload_containers.cache_volume(TOKENIZER_VOLUME, TOKENIZER_ROOT, on_node=False)
    args = preloading.tokenizer_args(endpoint.source, TOKENIZER_ROOT)
    rendered = preload_containers.render(TOKENIZER_CONTAINER, args, cache, endpoint.source, context)
    rendered.container["resources"] = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    return rendered.container, rendered.volumes, {**cache.mount, "readOnly": True}


def metadata(endpoint: Endpoint, workload: Workload = PROXY) -> Manifest:
    """Name, labels and controller owner of one of the workload's objects."""
    ref = endpoint.ref
    return {
        "name": name(ref.name, workload),
        "namespace": ref.namespace,
        "labels": labels.managed({labels.COMPONENT: workload.component, labels.ENDPOINT_LABEL: endpoint.label_value}),
        "ownerReferences": [owners.owner_reference(ref.kind, ref.name, ref.uid, controller=True)],
    }


def configmap(
    endpoint: Endpoint,
    warm_nodes: Iterable[str] | None = None,
    workload: Workload = PROXY,
    trusted_proxies: Sequence[str] = (),
) -> Manifest:
    """Only the knobs the endpoint sets (and `warmNodes` and `trustedProxies` when given); every other knob keeps its
    documented default."""
    rendered = config(endpoint, warm_nodes, trusted_proxies)
    chosen = rendered.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(endpoint, workload),
        "data": {CONFIGMAP_KEY: yaml.safe_dump(chosen, sort_keys=True)},
    }


def service_account(endpoint: Endpoint, workload: Workload = PROXY) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(endpoint, workload),
        "automountServiceAccountToken": True,
    }


def role(endpoint: Endpoint, workload: Workload = PROXY, extra_rules: Sequence[Manifest] = ()) -> Manifest:
    """Read the model Service's EndpointSlices and this workload's ConfigMap (plus `extra_rules`); nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(endpoint, workload),
        "rules": [
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [name(endpoint.ref.name, workload)],
                "verbs": ["get", "list", "watch"],
            },
            *extra_rules,
        ],
    }


def role_binding(endpoint: Endpoint, workload: Workload = PROXY) -> Manifest:
    own = name(endpoint.ref.name, workload)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(endpoint, workload),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": own},
        "subjects": [{"kind": "ServiceAccount", "name": own, "namespace": endpoint.ref.namespace}],
    }


def spread(endpoint: Endpoint, workload: Workload = PROXY) -> list[Manifest]:
    """Spread the workload's pods over nodes, then zones; best effort, so a small cluster still runs every replica."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": pod_selector(endpoint, workload)},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key in SPREAD_TOPOLOGY_KEYS
    ]


def discovery_args(endpoint: Endpoint, workload: Workload = PROXY) -> list[str]:
    """The flags by which the program follows the model pods' EndpointSlices and its ConfigMap."""
    return [
        "--namespace",
        endpoint.ref.namespace,
        "--service",
        models_service_name(endpoint.ref.name),
        "--configmap",
        name(endpoint.ref.name, workload),
    ]


def workload_deployment(
    endpoint: Endpoint, context: RenderContext, workload: Workload, container: Manifest, strategy: Manifest
) -> Manifest:
    """The workload's Deployment around its main container: the operator image, its ServiceAccount, spread, the
    router node selector and (following KV events from a fetched source) the tokenizer fetch."""
    selector = pod_selector(endpoint, workload)
    container = {
        "name": container["name"],
        "image": context.operator_image,
        "imagePullPolicy": context.image_pull_policy,
        **container,
        "securityContext": dict(security.RESTRICTED),
    }
    pod_spec: Manifest = {
        "serviceAccountName": name(endpoint.ref.name, workload),
        "containers": [container],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "topologySpreadConstraints": spread(endpoint, workload),
    }
    if context.router_node_selector:
        pod_spec["nodeSelector"] = dict(context.router_node_selector)
    if fetches_tokenizer(endpoint):
        fetch, volumes, mount = _tokenizer_fetch(endpoint, context)
        pod_spec["initContainers"] = [fetch]
        pod_spec["volumes"] = volumes
        container["volumeMounts"] = [mount]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(endpoint, workload),
        "spec": {
            "replicas": replicas(endpoint, context),
            "selector": {"matchLabels": selector},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {**labels.managed(), **selector}},
                "spec": pod_spec,
            },
        },
    }


def deployment(endpoint: Endpoint, context: RenderContext) -> Manifest:
    """The router pods: rolled with maxUnavailable 0, spread, draining for `DRAIN_SECONDS` before they stop."""
    container = {
        "name": "router",
        "args": [
            "router",
            *discovery_args(endpoint),
            "--port",
            str(ROUTER_PORT),
            "--admin-port",
            str(ROUTER_ADMIN_PORT),
            "--port-name",
            endpoint.worker.model_invocation_port.name,
            *sync_args(endpoint),
        ],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [
            {"name": ROUTER_PORT_NAME, "containerPort": ROUTER_PORT, "protocol": "TCP"},
            {"name": ROUTER_ADMIN_PORT_NAME, "containerPort": ROUTER_ADMIN_PORT, "protocol": "TCP"},
            {"name": ROUTER_SYNC_PORT_NAME, "containerPort": ROUTER_SYNC_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": ROUTER_PORT}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health", "port": ROUTER_PORT}, "periodSeconds": 10},
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    rendered = workload_deployment(endpoint, context, PROXY, container, rolling)
    pod = rendered["spec"]["template"]["spec"]
    secret = {"secretName": sync_secret_name(endpoint.ref.name), "defaultMode": 0o440}
    pod["volumes"] = [*pod.get("volumes", []), {"name": SYNC_VOLUME, "secret": secret}]
    main = pod["containers"][0]
    main["volumeMounts"] = [
        *main.get("volumeMounts", []),
        {"name": SYNC_VOLUME, "mountPath": SYNC_ROOT, "readOnly": True},
    ]
    pod["securityContext"]["fsGroup"] = SYNC_FS_GROUP
    return rendered


#: the group that may read the mounted sync key (the router container's user)
SYNC_FS_GROUP = security.CACHE_UID


def sync_args(endpoint: Endpoint) -> list[str]:
    """The flags by which a router shares its picks with the endpoint's other routers (found through
    `<endpoint>-router`, this pod's own address left out)."""
    return [
        "--sync-port",
        str(ROUTER_SYNC_PORT),
        "--sync-key-file",
        f"{SYNC_ROOT}/{SYNC_KEY}",
        "--peers-service",
        name(endpoint.ref.name),
        "--sync-advertise",
        "$(POD_IP)",
    ]


def sync_secret(endpoint: Endpoint, key: str) -> Manifest:
    """The endpoint's sync key (`key`, chosen once by the controller and kept): only the router pods mount it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**metadata(endpoint), "name": sync_secret_name(endpoint.ref.name)},
        "type": "Opaque",
        "data": {SYNC_KEY: base64.b64encode(key.encode()).decode()},
    }


def peers_service(endpoint: Endpoint) -> Manifest:
    """`<endpoint>-router`: headless, the router pods' sync port; its EndpointSlices are how routers find each other
    (not-ready routers included: a router's load counts before it serves)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(endpoint),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": pod_selector(endpoint),
            "ports": [
                {
                    "name": ROUTER_SYNC_PORT_NAME,
                    "port": ROUTER_SYNC_PORT,
                    "targetPort": ROUTER_SYNC_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def disruption_budget(endpoint: Endpoint, workload: Workload = PROXY, max_unavailable: int | str = 1) -> Manifest:
    """At most `max_unavailable` of the workload's pods evicted at a time (a drain of a one-router endpoint is not
    blocked)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(endpoint, workload),
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": pod_selector(endpoint, workload)}},
    }


def network_policy(
    endpoint: Endpoint, context: RenderContext, workload: Workload = PROXY, traffic_port: int = ROUTER_PORT
) -> Manifest:
    """The workload's pods accept the traffic port from anyone; the admin port (/metrics, /router/status) only from
    `context.router_admin_from` (the chart's `router.adminFrom`; none by default: `kubectl port-forward` still works,
    it does not cross the pod network); the proxy's sync port only from this endpoint's own router pods. Egress is left
    open: the router calls the API server, the model pods and its peers."""
    ingress: list[Manifest] = [{"ports": [{"port": traffic_port, "protocol": "TCP"}]}]
    if workload == PROXY:
        ingress.append(
            {
                "from": [{"podSelector": {"matchLabels": pod_selector(endpoint, workload)}}],
                "ports": [{"port": ROUTER_SYNC_PORT, "protocol": "TCP"}],
            }
        )
    if context.router_admin_from:
        ingress.append(
            {
                "from": [dict(peer) for peer in context.router_admin_from],
                "ports": [{"port": ROUTER_ADMIN_PORT, "protocol": "TCP"}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(endpoint, workload),
        "spec": {
            "podSelector": {"matchLabels": pod_selector(endpoint, workload)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def models_service(endpoint: Endpoint) -> Manifest:
    """Headless Service of the model pods: no virtual IP, only EndpointSlices (ready pods) for the router to follow."""
    port = endpoint.worker.model_invocation_port
    meta = metadata(endpoint)
    meta["name"] = models_service_name(endpoint.ref.name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "selector": deployments.pod_selector(endpoint),
            "ports": [{"name": port.name, "port": port.container_port, "targetPort": port.name, "protocol": "TCP"}],
        },
    }


def manifests(
    endpoint: Endpoint, context: RenderContext, warm_nodes: Iterable[str] | None = None, sync_key: str = ""
) -> list[Manifest]:
    """Everything the router needs, in apply order; `warm_nodes` (None: no weights cache) go in its ConfigMap,
    `sync_key` (the controller's, kept once chosen) in its sync Secret."""
    return [
        configmap(endpoint, warm_nodes, trusted_proxies=context.router_trusted_proxies),
        service_account(endpoint),
        role(endpoint),
        role_binding(endpoint),
        models_service(endpoint),
        sync_secret(endpoint, sync_key),
        peers_service(endpoint),
        network_policy(endpoint, context),
        deployment(endpoint, context),
        disruption_budget(endpoint),
    ]


def objects(endpoint_name: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every router object, for removal (the `<endpoint>-router` Service is the routers'
    headless peers Service; earlier versions' client Service of that name goes with it)."""
    router = name(endpoint_name)
    return [
        ("v1", "Secret", sync_secret_name(endpoint_name)),
        ("apps/v1", "Deployment", router),
        ("policy/v1", "PodDisruptionBudget", router),
        ("networking.k8s.io/v1", "NetworkPolicy", router),
        ("v1", "Service", router),
        ("v1", "Service", models_service_name(endpoint_name)),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", router),
        ("rbac.authorization.k8s.io/v1", "Role", router),
        ("v1", "ServiceAccount", router),
        ("v1", "ConfigMap", router),
    ]
