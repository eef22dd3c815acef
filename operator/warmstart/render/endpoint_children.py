"""Everything an endpoint wants to exist, rendered: its caches, its FSx claim, and (gate open) its Deployment and
Service, its router or endpoint picker, and its PodMonitor. Pure: the reconcile passes in what it observed."""

from __future__ import annotations

from typing import Any

from warmstart.render import caches, deployments, monitoring, owners, pickers, router, services
from warmstart.render import fsx as render_fsx
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]


def children(
    endpoint: Endpoint,
    gate_open: bool,
    generation: Generation,
    context: RenderContext,
    via_router: bool,
    warm_nodes: list[str] | None,
    pool_served: bool,
    sync_key: str = "",
) -> list[Manifest]:
    """All this endpoint wants to exist, rendered: caches, then (gate open) Deployment and Service, then the router
    (or in gateway mode the picker, and the InferencePool where its API is served); `sync_key` is the router
    replicas' sync key (chosen once by the controller)."""
    wanted: list[Manifest] = []
    storage = render_fsx.storage_of(endpoint.source)
    if storage is not None:  # the claim (and its static volume) that the Deployment's preload mounts
        wanted += [
            render_fsx.persistent_volume(endpoint.ref.namespace, storage),
            render_fsx.persistent_volume_claim(endpoint.ref.namespace, storage, _plain_ref(endpoint)),
        ]
    if endpoint.weights_enabled:
        wanted.append(caches.weights_cache(endpoint, context))
    if endpoint.image_cache:
        wanted.append(caches.image_cache(endpoint))
    if gate_open:
        wanted += [
            deployments.deployment(endpoint, generation, context),
            services.client_service(endpoint, via_router=via_router),
        ]
    if endpoint.proxy_enabled:
        wanted += router.manifests(endpoint, context, warm_nodes, sync_key)
    elif endpoint.endpoint_picker is not None:
        wanted += pickers.manifests(endpoint, context, warm_nodes, pool_served)
    if gate_open and endpoint.metrics_enabled and context.pod_monitors:
        wanted.append(monitoring.pod_monitor(endpoint))
    return wanted


def _plain_ref(endpoint: Endpoint) -> Manifest:
    ref = endpoint.ref
    return owners.owner_reference(ref.kind, ref.name, ref.uid, controller=False)
