"""Remove an endpoint's router when routing is turned off (applying it is part of the endpoint's children)."""

from __future__ import annotations

from warmstart.controllers.storage import Store
from warmstart.render import router


def remove(store: Store, namespace: str, endpoint_name: str) -> None:
    """Delete the router objects (objects already gone are fine)."""
    for api_version, kind, name in router.objects(endpoint_name):
        store.delete(api_version, kind, name, namespace)
