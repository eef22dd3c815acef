"""A cold node where a model pod waits for a cache through the CSI driver becomes a target of that cache.

With cache access `csi` no model pod downloads weights itself: the driver keeps its volume waiting until the node
holds the cache, so the operator's own preload Job must go there, whatever the cache's targeting says.
"""

from __future__ import annotations

import datetime as dt

from test_weights_plans import KEY, node, spec

from warmstart.api.caches import ModelDataCacheConfigStatus
from warmstart.controllers import weights
from warmstart.render import cache_volumes
from warmstart.render import weights_plans as planning

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def plan(demanded: frozenset[str]) -> planning.Plan:
    nodes = [
        node("gpu-a"),
        node("cpu-b", itype="ml.m5.large"),
        node("cp", itype="ml.m5.large"),
    ]
    nodes[2].labels["node-role.kubernetes.io/control-plane"] = ""
    observed = planning.Observed(
        generation=1,
        key=KEY,
        spec=spec(),
        status=ModelDataCacheConfigStatus(),
        nodes=nodes,
        jobs=[],
        results={},
        retryable_reasons=frozenset(),
        demanded=demanded,
    )
    return planning.plan(observed, NOW)


def test_a_node_where_a_model_pod_waits_gets_a_preload_job() -> None:
    assert [n for n, _ in plan(frozenset()).create] == ["gpu-a"]
    assert sorted(n for n, _ in plan(frozenset({"cpu-b"})).create) == ["cpu-b", "gpu-a"]


def test_a_control_plane_node_never_becomes_a_target() -> None:
    assert [n for n, _ in plan(frozenset({"cp"})).create] == ["gpu-a"]


def test_the_index_finds_scheduled_model_pods_reading_a_key_through_the_driver() -> None:
    reader = cache_volumes.csi_volume("model", "k" * 32, write=False)
    writer = cache_volumes.csi_volume("cache", "w" * 32, write=True)
    scheduled = {"nodeName": "gpu-a", "volumes": [reader, writer, {"name": "tmp", "emptyDir": {}}]}
    assert weights.csi_demand_index(namespace="team", spec=scheduled) == {("team", "k" * 32): "gpu-a"}
    assert weights.csi_demand_index(namespace="team", spec={"volumes": [reader]}) == {}  # not scheduled yet
    other_driver = {"name": "m", "csi": {"driver": "other", "volumeAttributes": {"key": "x", "access": "read"}}}
    assert weights.csi_demand_index(namespace="team", spec={"nodeName": "n", "volumes": [other_driver]}) == {}
