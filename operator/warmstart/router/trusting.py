"""Which EndpointSlices the router believes: only those the EndpointSlice controller keeps for the model Service.

A slice names its Service by the label ``kubernetes.io/service-name``, which anyone allowed to
write EndpointSlices in the namespace can set: a slice written by hand would send the router's
traffic (prompts included) to addresses of the writer's choosing. The EndpointSlice controller
labels the slices it manages ``endpointslice.kubernetes.io/managed-by:
endpointslice-controller.k8s.io`` and makes the Service their controlling owner, and it
rewrites or deletes any slice carrying its label for a Service with a selector (the model
Service has one); the router uses only slices with that label, the Service's name and that owner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def managed(endpoint_slice: Any, service: str) -> bool:
    """``endpoint_slice`` (a kubernetes client object) is kept by the EndpointSlice controller for ``service``."""
    meta = endpoint_slice.metadata
    labels = meta.labels or {}
    if labels.get(MANAGED_BY_LABEL) != CONTROLLER or labels.get(SERVICE_NAME_LABEL) != service:
        return False
    return any(
        ref.api_version == "v1" and ref.kind == "Service" and ref.name == service and ref.controller
        for ref in meta.owner_references or []
    )


def split(slices: Iterable[Any], service: str) -> tuple[list[Any], list[str]]:
    """(the slices the controller keeps for ``service``, the names of the others)."""
    kept: list[Any] = []
    ignored: list[str] = []
    for endpoint_slice in slices:
        if managed(endpoint_slice, service):
            kept.append(endpoint_slice)
        else:
            ignored.append(str(endpoint_slice.metadata.name))
    return kept, sorted(ignored)
