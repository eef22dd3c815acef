"""The model Deployment: warm-node preferences, the cache volume, the cold-node fallback, a default readiness probe.

With `cache.access: csi` a caching model pod has the driver's read-only volume of its key and no warmstart init
container; with `hostPath` it runs the preload (`--if-missing`) itself, after the root `warmstart-cache-owner` step.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from warmstart.api import nodelabels, preloading
from warmstart.api.blocks import DEFAULT_HEALTH_CHECK_PATH
from warmstart.api.workers import Worker
from warmstart.render import cache_volumes, kvwiring, labels, owners, preload_containers, resource_claims, tolerations
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

WEIGHTS_WARM_WEIGHT = 100
IMAGE_WARM_WEIGHT = 30
#: the first of `instanceTypes` gets this weight, the next one less, never below 1
INSTANCE_TYPE_TOP_WEIGHT = 10
INIT_CONTAINER = "warmstart-preload"
#: the default readiness probe's period and failures: a loaded model turns ready within 5 s, a hung one leaves the
#: Service (and the router) after 15 s
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURE_THRESHOLD = 3
#: name of the model container's metrics port when it is not the invocation port
METRICS_PORT_NAME = "metrics"
#: the scrape annotations Prometheus' kubernetes_sd examples (and most charts) read, when there is no PodMonitor
SCRAPE_ANNOTATION = "prometheus.io/scrape"
PATH_ANNOTATION = "prometheus.io/path"
PORT_ANNOTATION = "prometheus.io/port"


@dataclass(frozen=True)
class Generation:
    """Which cache generation the pods use (the content keys), decided by the gate."""

    weights_key: str
    image_key: str


def pod_selector(endpoint: Endpoint) -> dict[str, str]:
    return {labels.ENDPOINT_LABEL: endpoint.label_value, labels.ENDPOINT_KIND_LABEL: endpoint.ref.kind.lower()}


def selector_string(endpoint: Endpoint) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(pod_selector(endpoint).items()))


def _warm_term(label: str, weight: int) -> Manifest:
    return {
        "weight": weight,
        "preference": {"matchExpressions": [{"key": label, "operator": "In", "values": [nodelabels.READY]}]},
    }


def affinity(endpoint: Endpoint, generation: Generation) -> Manifest:
    """Required: the target nodes, never a control-plane node. Preferred: weights-warm, image-warm, instance types."""
    preferred = []
    if endpoint.weights_enabled:
        preferred.append(_warm_term(nodelabels.weights_ready_label(generation.weights_key), WEIGHTS_WARM_WEIGHT))
    if endpoint.image_cache:
        preferred.append(_warm_term(nodelabels.image_ready_label(generation.image_key), IMAGE_WARM_WEIGHT))
    for rank, instance_type in enumerate(endpoint.instance_types or []):
        if len(endpoint.instance_types or []) < 2:
            break
        weight = max(INSTANCE_TYPE_TOP_WEIGHT - rank, 1)
        preferred.append(
            {
                "weight": weight,
                "preference": {
                    "matchExpressions": [{"key": nodelabels.INSTANCE_TYPE, "operator": "In", "values": [instance_type]}]
                },
            }
        )
    if endpoint.node_affinity is not None:
        preferred += [
            p.to_api() for p in endpoint.node_affinity.preferred_during_scheduling_ignored_during_execution or []
        ]
    targeted = endpoint.targeting().node_affinity
    required = targeted.required_during_scheduling_ignored_during_execution if targeted else None
    node_affinity: Manifest = {
        "requiredDuringSchedulingIgnoredDuringExecution": tolerations.exclude_control_plane(
            required.to_api() if required is not None else None
        )
    }
    if preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node_affinity}


def _env(worker: Worker) -> list[Manifest]:
    return [e.to_api() for e in worker.environment_variables or []]


def preload_init_container(
    endpoint: Endpoint, generation: Generation, context: RenderContext
) -> preload_containers.Rendered:
    """`warmstart preload --if-missing`: milliseconds on a warm node, the normal download on a cold one.

    A cold node is one no preload Job reached (scale-out beyond the preloaded fleet, a tainted node). The model volume
    is the cache volume: the node's `<hostPath>/warmstart` (the subPath the kubelet creates under the existing root),
    or an emptyDir when caching is off.
    With the node cache, the Jobs' `warmstart-cache-owner` step runs first (`owner_steps`), so the non-root preload
    can write a directory that no Job prepared.
    """
    source = endpoint.source
    size = endpoint.weights_cache.model_size_bytes if endpoint.weights_cache else None
    args = preloading.preload_args(source, generation.weights_key, endpoint.host_path, size)
    cache = preload_containers.cache_volume(
        endpoint.worker.model_volume_mount.name, endpoint.host_path, on_node=endpoint.weights_enabled
    )
    return preload_containers.render(INIT_CONTAINER, args, cache, source, context)


def default_readiness_probe(endpoint: Endpoint) -> Manifest:
    """An HTTP GET of `loadBalancer.healthCheckPath` (default /ping) on the invocation port.

    Without a readiness probe a model pod counts as ready as soon as its process starts, minutes before the model has
    loaded, and the Service and the router would send it requests it cannot answer.
    """
    configured = endpoint.load_balancer.health_check_path if endpoint.load_balancer else None
    path = configured or DEFAULT_HEALTH_CHECK_PATH
    return {
        "httpGet": {
            "path": path,
            "port": endpoint.worker.model_invocation_port.name,
        },
        "periodSeconds": READINESS_PERIOD_SECONDS,
        "failureThreshold": READINESS_FAILURE_THRESHOLD,
    }


def metrics_port(endpoint: Endpoint) -> tuple[str, int, str]:
    """(port name, port number, path) where the model container serves metrics (HyperPod's defaults: 8080 /metrics)."""
    found = endpoint.metrics.model_metrics if endpoint.metrics else None
    number, path = (found.port, found.path) if found else (8080, "/metrics")
    invocation = endpoint.worker.model_invocation_port
    return (invocation.name if number == invocation.container_port else METRICS_PORT_NAME), number, path


def through_csi(endpoint: Endpoint, context: RenderContext) -> bool:
    """Whether the model pods read the cache through the CSI driver (no preload init container, no hostPath)."""
    return endpoint.weights_enabled and context.cache_access == cache_volumes.CacheAccess.CSI


def _model_mount(endpoint: Endpoint, generation: Generation, mount_path: str, context: RenderContext) -> Manifest:
    """The model files (this generation's cache directory, or the user's own model volume), read-only."""
    mount: Manifest = {"name": endpoint.worker.model_volume_mount.name, "mountPath": mount_path, "readOnly": True}
    if through_csi(endpoint, context) or endpoint.model_on_volume:  # the CSI volume is the key's directory itself
        return mount
    # the hostPath volume is the admin's root (its `warmstart` holds the keys); the emptyDir holds `keys` itself
    model = posixpath.relpath(preloading.model_dir("/", generation.weights_key), "/")
    mount["subPath"] = model if endpoint.weights_enabled else posixpath.relpath(model, preloading.CACHE_DIR_NAME)
    return mount


def user_init_containers(endpoint: Endpoint, generation: Generation, context: RenderContext) -> list[Manifest]:
    """`kubernetes.initContainers`, to run after the preload: a mount of the model volume shows the model files,
    read-only, as the model container sees them (never the node's whole cache directory). With the model on the
    user's own volume, they are kept as written (render/passthrough.py decides whether they may be)."""
    model_volume = endpoint.worker.model_volume_mount.name
    rendered = []
    for container in (endpoint.kubernetes.init_containers or []) if endpoint.kubernetes else []:
        if endpoint.model_on_volume:
            rendered.append(dict(container))
            continue
        mounts = [
            _model_mount(endpoint, generation, str(m.get("mountPath", "")), context)
            if m.get("name") == model_volume
            else m
            for m in container.get("volumeMounts") or []
        ]
        rendered.append({**container, "volumeMounts": mounts} if mounts else dict(container))
    return rendered


def _worker_container(endpoint: Endpoint, generation: Generation, context: RenderContext) -> Manifest:
    worker = endpoint.worker
    port = worker.model_invocation_port
    ports = [{"name": port.name, "containerPort": port.container_port, "protocol": "TCP"}]
    if endpoint.metrics_enabled:
        name, number, _ = metrics_port(endpoint)
        if number != port.container_port:
            ports.append({"name": name, "containerPort": number, "protocol": "TCP"})
    events = kvwiring.of(endpoint)
    ports += [{"name": name, "containerPort": number, "protocol": "TCP"} for name, number in events.ports]
    container: Manifest = {
        "name": "worker",
        "image": worker.image,
        "ports": ports,
        "volumeMounts": [_model_mount(endpoint, generation, worker.model_volume_mount.mount_path, context)],
        "resources": worker.resources.to_api(),
    }
    args = events.args if events.args is not None else worker.args
    for key, value in (("args", args), ("command", worker.command), ("workingDir", worker.working_dir)):
        if value:
            container[key] = value
    env = _env(worker)
    if env:
        container["env"] = env
    if worker.probes:
        container.update(worker.probes.to_api())
    if "readinessProbe" not in container:
        container["readinessProbe"] = default_readiness_probe(endpoint)
    return container


def scrape_annotations(endpoint: Endpoint, context: RenderContext) -> dict[str, str]:
    """prometheus.io annotations for the model pods, when metrics are on and no PodMonitor does the job."""
    if not endpoint.metrics_enabled or context.pod_monitors:
        return {}
    _, number, path = metrics_port(endpoint)
    return {SCRAPE_ANNOTATION: "true", PATH_ANNOTATION: path, PORT_ANNOTATION: str(number)}


def deployment(endpoint: Endpoint, generation: Generation, context: RenderContext) -> Manifest:
    """The model Deployment: rolls with maxUnavailable 0, so an update never drops serving capacity."""
    selector = pod_selector(endpoint)
    pod_labels = {
        **labels.managed({labels.COMPONENT: "model-server"}),
        **selector,
        **((endpoint.kubernetes.labels or {}) if endpoint.kubernetes else {}),
    }
    annotations = {
        f"{nodelabels.CACHE_PREFIX}/weights-key": generation.weights_key,
        f"{nodelabels.CACHE_PREFIX}/image-key": generation.image_key,
        **scrape_annotations(endpoint, context),
        **((endpoint.kubernetes.annotations or {}) if endpoint.kubernetes else {}),
    }
    kube = endpoint.kubernetes
    user_steps = user_init_containers(endpoint, generation, context)
    if endpoint.model_on_volume:  # HyperPod's kubernetesVolume: the user's volume, as written; nothing to preload
        init_containers, volumes = user_steps, []
    elif through_csi(endpoint, context):
        # the driver mounts the cache read-only once the node's preload Job filled it: nothing to run before
        model = cache_volumes.csi_volume(endpoint.worker.model_volume_mount.name, generation.weights_key, write=False)
        init_containers, volumes = user_steps, [model]
    else:
        preload = preload_init_container(endpoint, generation, context)
        init_containers = [*preload.owner_steps, preload.container, *user_steps]
        volumes = preload.volumes
    pod_spec: Manifest = {
        "affinity": affinity(endpoint, generation),
        "initContainers": init_containers,
        "containers": [_worker_container(endpoint, generation, context)],
        "volumes": [*volumes, *((kube.volumes or []) if kube else [])],
    }
    if not init_containers:
        del pod_spec["initContainers"]
    if not pod_spec["volumes"]:
        del pod_spec["volumes"]
    if kube and kube.service_account_name:
        pod_spec["serviceAccountName"] = kube.service_account_name
    if kube and kube.scheduler_name:
        pod_spec["schedulerName"] = kube.scheduler_name
    if kube and kube.node_selector:
        pod_spec["nodeSelector"] = dict(kube.node_selector)
    if kube and kube.tolerations:
        pod_spec["tolerations"] = list(kube.tolerations)
    if kube and kube.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in kube.image_pull_secrets]
    claims = resource_claims.pod_claims(endpoint.worker)
    if claims:
        pod_spec["resourceClaims"] = claims
    if not pod_spec["affinity"]:
        del pod_spec["affinity"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": endpoint.child_name,
            "namespace": endpoint.ref.namespace,
            "labels": {**labels.managed({labels.COMPONENT: "model-server"}), **selector},
            "ownerReferences": [_controller_ref(endpoint)],
        },
        "spec": {
            "replicas": endpoint.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": pod_spec},
        },
    }


def _controller_ref(endpoint: Endpoint) -> Manifest:
    return owners.owner_reference(endpoint.ref.kind, endpoint.ref.name, endpoint.ref.uid, controller=True)
