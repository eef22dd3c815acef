"""Remove an endpoint's router, or its gateway-mode picker and InferencePool, once they are no longer wanted
(applying them is part of the endpoint's children)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable

import kopf

from warmstart.api.gateways import INFERENCE_POOL_API_VERSION
from warmstart.controllers.storage import Store
from warmstart.render import pickers, router

#: (apiVersion, kind, name) of an object
ObjectKey = tuple[str, str, str]

#: seconds the answer to "does the API server serve InferencePools?" is reused (the endpoint timer asks every tick)
SERVED_TTL_SECONDS = 10.0
_SERVED = "inference_pool_served"


def remove(store: Store, namespace: str, endpoint_name: str, uid: str, keep: Collection[ObjectKey] = ()) -> None:
    """Delete the proxy router's objects this endpoint owns, except those in `keep` (still wanted: gateway mode
    follows the same `<endpoint>-models` Service)."""
    _remove_owned(store, namespace, router.objects(endpoint_name), uid, keep)


def remove_picker(store: Store, namespace: str, endpoint_name: str, uid: str, keep: Collection[ObjectKey] = ()) -> None:
    """Delete gateway mode's objects (InferencePool, picker, its Lease) this endpoint owns, except those in `keep`."""
    _remove_owned(store, namespace, pickers.objects(endpoint_name), uid, keep)


def _remove_owned(
    store: Store, namespace: str, objects: Iterable[ObjectKey], uid: str, keep: Collection[ObjectKey]
) -> None:
    """Delete each object this endpoint owns (objects already gone are fine).

    An object of the same name that this endpoint does not own is left alone: `<a>-models` may be the Service of an
    endpoint named `a-models`, and `<a>-router` (the Service earlier versions rendered) that of one named `a-router`.
    An InferencePool whose API is not served is simply not there.
    """
    for api_version, kind, name in objects:
        if (api_version, kind, name) in keep:
            continue
        if api_version == INFERENCE_POOL_API_VERSION and not store.serves(api_version):
            continue
        found = store.get(api_version, kind, name, namespace)
        owners = (found or {}).get("metadata", {}).get("ownerReferences") or []
        if any(owner.get("uid") == uid for owner in owners):
            store.delete(api_version, kind, name, namespace)


def keys(manifests: Iterable[dict[str, object]]) -> set[ObjectKey]:
    """(apiVersion, kind, name) of rendered manifests."""
    return {(str(m["apiVersion"]), str(m["kind"]), str(m["metadata"]["name"])) for m in manifests}  # type: ignore[index]


def pool_served(store: Store, memo: kopf.Memo) -> bool:
    """Whether the API server serves InferencePools (the Gateway API Inference Extension CRD is installed); asked at
    most every `SERVED_TTL_SECONDS`, so installing the CRD later is noticed without an operator restart."""
    cached: tuple[float, bool] | None = memo.get(_SERVED)
    now = time.monotonic()
    if cached is not None and now - cached[0] < SERVED_TTL_SECONDS:
        return cached[1]
    served = store.serves(INFERENCE_POOL_API_VERSION)
    memo[_SERVED] = (now, served)
    return served
