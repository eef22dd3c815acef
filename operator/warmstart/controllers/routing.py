"""Remove an endpoint's router when routing is turned off (applying it is part of the endpoint's children)."""

from __future__ import annotations

from warmstart.controllers.storage import Store
from warmstart.render import router


def remove(store: Store, namespace: str, endpoint_name: str, uid: str) -> None:
    """Delete the router objects this endpoint owns (objects already gone are fine).

    An object of the same name that this endpoint does not own is left alone: `<a>-models` may be the Service of an
    endpoint named `a-models`, and `<a>-router` (the Service earlier versions rendered) that of one named `a-router`.
    """
    for api_version, kind, name in router.objects(endpoint_name):
        found = store.get(api_version, kind, name, namespace)
        owners = (found or {}).get("metadata", {}).get("ownerReferences") or []
        if any(owner.get("uid") == uid for owner in owners):
            store.delete(api_version, kind, name, namespace)
