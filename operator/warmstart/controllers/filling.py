"""Nodes that a model pod's own preload filled (cache access `hostPath`): label them ready, as a preload Job would.

A model pod on a cold node fills the node cache in its `warmstart-preload` init container. The endpoint's status loop
reads the endpoint's pods from an index. A pod that ran exactly the init container the operator renders for the
endpoint, as its stored Deployment holds it (render/model_pod_fills.py), and ended with a complete cache there gets
its node labelled with the weights key's ready label, once, with a Normal Event `NodeFilledByModelPod`. Then the
scheduler's warm preference, the router's `warmNodes` and the warm/cold pod count see the node like any other the
operator's Jobs filled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import nodelabels
from warmstart.controllers import labelling, sharing
from warmstart.controllers.nodes import lookup as lookup_node
from warmstart.controllers.storage import Store
from warmstart.render import deployments, model_pod_fills
from warmstart.render import labels as label_keys
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint

#: the Event on the endpoint when its pod's preload filled a node
REASON = "NodeFilledByModelPod"


def endpoint_pod_preloads(
    namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(namespace, endpoint, kind) -> the pod's name, node, init containers, volumes and init statuses, for pods whose
    `warmstart-preload` init container has ended (the rest of the pod is never needed)."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    ended = [
        s
        for s in status.get("initContainerStatuses") or []
        if s.get("name") == deployments.INIT_CONTAINER and (s.get("state") or {}).get("terminated")
    ]
    if not ended or not spec.get("nodeName"):
        return {}
    kept = {
        "metadata": {"name": (body.get("metadata") or {}).get("name", "")},
        "spec": {k: spec.get(k) for k in ("nodeName", "initContainers", "volumes")},
        "status": {"initContainerStatuses": ended},
    }
    kind = labels.get(label_keys.ENDPOINT_KIND_LABEL, "")
    return {(namespace or "", labels[label_keys.ENDPOINT_LABEL], kind): kept}


def label_filled_nodes(
    store: Store,
    memo: kopf.Memo,
    body: kopf.Body,
    endpoint: Endpoint,
    generation: Generation,
    context: RenderContext,
    deployment: Mapping[str, Any] | None,
    indexes: Mapping[str, Any],
) -> None:
    """Label ready every node one of the endpoint's pods filled with its current weights key (`deployment`: the
    endpoint's Deployment as the API server stores it)."""
    if deployment is None:
        return
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    expected = deployments.preload_init_container(endpoint, generation, context)
    label = nodelabels.weights_ready_label(generation.weights_key)
    labelled: dict[tuple[str, str], float] = memo.setdefault("nodes_filled_by_pods", {})
    clock = time.monotonic()
    for written, at in list(labelled.items()):
        if clock - at > labelling.LABEL_GRACE_SECONDS:
            del labelled[written]
    key = (endpoint.ref.namespace, endpoint.label_value, endpoint.ref.kind.lower())
    for pod in sharing.lookup(indexes["endpoint_pod_preloads"], key):
        fill = model_pod_fills.fill_of(pod, template, expected)
        if fill is None or (label, fill.node) in labelled:
            continue
        node = lookup_node(indexes["node_facts"], fill.node)  # the pods' nodes only, not the fleet's
        if node is None or node.deleting or node.labels.get(label) == nodelabels.READY:
            continue
        if labelling.set_label(store, fill.node, label, nodelabels.READY):
            labelled[(label, fill.node)] = clock
            size = f", {fill.bytes} bytes" if fill.bytes is not None else ""
            message = f"pod {fill.pod} filled node {fill.node} with its weights ({fill.reason}{size}): labelled ready"
            kopf.event(body, type="Normal", reason=REASON, message=message)
