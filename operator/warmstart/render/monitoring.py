"""The PodMonitor that scrapes an endpoint's model pods, where the Prometheus Operator's CRD is installed."""

from __future__ import annotations

from typing import Any

from warmstart.render import deployments, labels, owners
from warmstart.render.endpoints import Endpoint

Manifest = dict[str, Any]

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PodMonitor"
#: the CRD whose presence makes the operator render PodMonitors
CRD_NAME = "podmonitors.monitoring.coreos.com"


def pod_monitor(endpoint: Endpoint) -> Manifest:
    """Scrape `metrics.modelMetrics` (path, port) of the model pods every `metricsScrapeIntervalSeconds`."""
    name, _, path = deployments.metrics_port(endpoint)
    interval = endpoint.metrics.metrics_scrape_interval_seconds if endpoint.metrics else 15
    ref = endpoint.ref
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": endpoint.child_name,
            "namespace": ref.namespace,
            "labels": {**labels.managed({labels.COMPONENT: "model-server"}), **deployments.pod_selector(endpoint)},
            "ownerReferences": [owners.owner_reference(ref.kind, ref.name, ref.uid, controller=True)],
        },
        "spec": {
            "selector": {"matchLabels": deployments.pod_selector(endpoint)},
            "podMetricsEndpoints": [{"port": name, "path": path, "interval": f"{interval}s"}],
        },
    }
