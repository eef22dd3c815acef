"""The demo's live view of the endpoint, its weights cache and the nodes; reprinted when something changes."""

from __future__ import annotations

import sys

from warmstart.api import API_VERSION, nodelabels
from warmstart.controllers.storage import Store
from warmstart.demo import facts
from warmstart.render import labels


class Table:
    """Rows read from the cluster on every :meth:`show`."""

    def __init__(self, store: Store, name: str, namespace: str) -> None:
        self.store, self.name, self.namespace = store, name, namespace
        self.last = ""

    def rows(self) -> list[str]:
        iec = self.store.get(API_VERSION, "InferenceEndpointConfig", self.name, self.namespace) or {}
        status = iec.get("status") or {}
        wkey = (status.get("resolved") or {}).get("weightsCacheKey", "")
        ikey = (status.get("resolved") or {}).get("imageCacheKey", "")
        mdcc = (
            (self.store.get(API_VERSION, "ModelDataCacheConfig", f"weights-{wkey}", self.namespace) or {})
            if wkey
            else {}
        )
        per_node = {n["node"]: n for n in (mdcc.get("status") or {}).get("nodes") or []}
        pods: dict[str, int] = {}
        selector = f"{labels.ENDPOINT_LABEL}={self.name}"
        for pod in self.store.list("v1", "Pod", self.namespace, label_selector=selector):
            if pod.get("status", {}).get("phase") == "Running":
                node = pod["spec"].get("nodeName", "")
                pods[node] = pods.get(node, 0) + 1
        warm, cold = facts.placement(iec)
        cache = mdcc.get("status") or {}
        lines = [
            f"endpoint {self.name}: state={status.get('state', '-')}  replicas={status.get('availableReplicas', 0)}/"
            f"{iec.get('spec', {}).get('replicas', '-')}  warm pods={warm} cold pods={cold}",
            f"weights cache weights-{wkey or '?'}: {cache.get('state', '-')} "
            f"{cache.get('readyNodes', 0)}/{cache.get('targetNodes', 0)} nodes",
            f"  {'NODE':<28} {'TYPE':<16} {'KIND':<5} {'PRELOAD':<12} {'WEIGHTS':<8} {'IMAGE':<8} PODS",
        ]
        for node in sorted(self.store.list("v1", "Node"), key=lambda n: n["metadata"]["name"]):
            name, node_labels = node["metadata"]["name"], node["metadata"].get("labels", {})
            weights = "ready" if wkey and node_labels.get(nodelabels.weights_ready_label(wkey)) == "ready" else "-"
            image = "ready" if ikey and node_labels.get(nodelabels.image_ready_label(ikey)) == "ready" else "-"
            kind = "real" if node_labels.get(facts.REAL_NODE_LABEL) == "true" else "kwok"
            preload = per_node.get(name, {})
            done = preload.get("state", "-")
            if preload.get("bytes"):
                done += f" {preload['bytes'] / 1024**3:.1f}G/{preload.get('seconds') or 0:.0f}s"
            lines.append(
                f"  {name:<28} {node_labels.get(nodelabels.INSTANCE_TYPE, ''):<16} {kind:<5} {done:<12} {weights:<8}"
                f" {image:<8} {'#' * pods.get(name, 0)}"
            )
        return lines

    def show(self) -> None:
        text = "\n".join(self.rows())
        if text != self.last:
            print(("\033[2J\033[H" if sys.stdout.isatty() else "\n") + text, flush=True)
            self.last = text
