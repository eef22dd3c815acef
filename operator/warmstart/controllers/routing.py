"""Ensure or remove an endpoint's router; a strategy change only rewrites the ConfigMap, which the router watches."""

from __future__ import annotations

from warmstart.controllers.storage import Store
from warmstart.render import router
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint


def ensure(store: Store, endpoint: Endpoint, context: RenderContext) -> None:
    """Apply the router objects when routing is enabled, remove them when it is not."""
    if endpoint.routing_enabled:
        for manifest in router.manifests(endpoint, context):
            store.apply(manifest)
    else:
        remove(store, endpoint.ref.namespace, endpoint.ref.name)


def remove(store: Store, namespace: str, endpoint_name: str) -> None:
    """Delete the router objects if present (a no-op when routing was never on)."""
    if store.get("v1", "ConfigMap", router.name(endpoint_name), namespace) is None:
        return
    for api_version, kind in router.KINDS:
        store.delete(api_version, kind, router.name(endpoint_name), namespace)
