"""The per-node NVMe gauges: a node's series stays while any cache reports it, and goes when none does."""

from __future__ import annotations

import uuid

from prometheus_client import REGISTRY

from warmstart.api.caches import ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import NodeCacheState
from warmstart.controllers import nvme_usage


def status(*nodes: str) -> ModelDataCacheConfigStatus:
    entries = [
        NodeCacheStatus(node=n, state=NodeCacheState.READY, nvme_used_bytes=30, nvme_free_bytes=70) for n in nodes
    ]
    return ModelDataCacheConfigStatus(nodes=entries)


def series(node: str) -> tuple[float | None, float | None]:
    return (
        REGISTRY.get_sample_value("warmstart_node_nvme_used_bytes", {"node": node}),
        REGISTRY.get_sample_value("warmstart_node_nvme_free_bytes", {"node": node}),
    )


def test_a_node_keeps_its_series_while_one_cache_reports_it_and_loses_them_when_none_does() -> None:
    first, second = (f"cache-{uuid.uuid4().hex[:6]}" for _ in range(2))
    shared, alone = f"n-{uuid.uuid4().hex[:6]}", f"n-{uuid.uuid4().hex[:6]}"
    nvme_usage.export(first, status(shared, alone))
    nvme_usage.export(second, status(shared))
    assert series(shared) == series(alone) == (30, 70)

    nvme_usage.export(first, status())  # both nodes left the first cache (deleted, or no longer targeted)
    assert series(alone) == (None, None)
    assert series(shared) == (30, 70), "the second cache still reports it"

    nvme_usage.forget(second)  # the second cache was deleted
    assert series(shared) == (None, None)
