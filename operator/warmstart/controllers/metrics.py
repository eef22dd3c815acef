"""Prometheus metrics exported by the operator (served by `warmstart operator` on --metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CACHES = Gauge("warmstart_caches", "Caches by kind and state", ["kind", "state"])
CACHE_READY_NODES = Gauge("warmstart_cache_ready_nodes", "Nodes whose cache is complete", ["kind", "namespace", "name"])
CACHE_TARGET_NODES = Gauge(
    "warmstart_cache_target_nodes", "Nodes that should hold the cache", ["kind", "namespace", "name"]
)
BYTES_PRELOADED = Counter(
    "warmstart_bytes_preloaded", "Bytes written into node caches by preload Jobs", ["namespace", "name"]
)
PRELOAD_SECONDS = Histogram(
    "warmstart_preload_seconds",
    "Seconds one preload Job took on one node",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
)
PRELOAD_FAILURES = Counter("warmstart_preload_failures", "Preload Job failures by reason", ["reason"])
IMAGE_PULL_FAILURES = Counter("warmstart_image_pull_failures", "Image pre-pull failures by reason", ["reason"])
ENDPOINT_PODS = Gauge(
    "warmstart_endpoint_pods",
    "Endpoint pods on warm (cache-ready) versus cold nodes",
    ["namespace", "endpoint", "placement"],
)
ENDPOINT_STATE = Gauge(
    "warmstart_endpoint_state", "1 for the endpoint's current state", ["namespace", "endpoint", "state"]
)
GATE_WAIT_SECONDS = Histogram(
    "warmstart_gate_wait_seconds",
    "Seconds an endpoint waited for its weights cache before the Deployment was created or rolled",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600),
)
NODE_NVME_USED_BYTES = Gauge(
    "warmstart_node_nvme_used_bytes", "NVMe bytes the weights caches the operator knows use on a node", ["node"]
)
NODE_NVME_FREE_BYTES = Gauge(
    "warmstart_node_nvme_free_bytes", "NVMe capacity minus the known caches' bytes on a node", ["node"]
)
