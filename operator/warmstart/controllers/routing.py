"""Ensure or remove an endpoint's router; a strategy change only rewrites the ConfigMap, which the router watches."""

from __future__ import annotations

from warmstart.controllers.storage import Store
from warmstart.render import router
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint


def ensure(store: Store, endpoint: Endpoint, context: RenderContext, *, deployed: bool) -> str | None:
    """Apply the router objects when routing is enabled; remove them when it was turned off. Returns the router name."""
    if endpoint.routing_enabled:
        for manifest in router.manifests(endpoint, context):
            store.apply(manifest)
        return router.name(endpoint.ref.name)
    if deployed:
        remove(store, endpoint.ref.namespace, endpoint.ref.name)
    return None


def remove(store: Store, namespace: str, endpoint_name: str) -> None:
    """Delete the router objects (objects already gone are fine)."""
    for api_version, kind in router.KINDS:
        store.delete(api_version, kind, router.name(endpoint_name), namespace)
