"""The endpoints' Deployments (model, router, endpoint picker) as the watch last saw them: a kopf index.

An endpoint's reconcile runs on every event of its children and on the status interval; reading its Deployments
from this index instead of GETting them makes a pass with nothing to change cost the API server no request. The
index lags the API server by one watch event at most: a pass that reads a Deployment older than what it just
applied re-applies once (the generation it remembered differs), which is harmless.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.controllers import sharing
from warmstart.render import labels as label_keys

INDEX = "endpoint_deployments"
_KEPT = ("apiVersion", "kind", "metadata", "spec", "status")


def endpoint_deployments(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
    """(namespace, name) -> the Deployment (without managedFields) of every Deployment an endpoint owns."""
    kept = {key: body[key] for key in _KEPT if key in body}
    kept["metadata"] = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    return {(namespace or "", name): kept}


def deployment(indexes: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any] | None:
    """A copy of the Deployment ``namespace/name`` as last seen (None: there is none)."""
    for found in sharing.lookup(indexes[INDEX], (namespace, name)):
        return copy.deepcopy(dict(found))
    return None


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index("apps", "v1", "deployments", labels={label_keys.ENDPOINT_LABEL: kopf.PRESENT}, registry=registry)(
        endpoint_deployments
    )
