"""Several caches on one NVMe: the space the others take, and which unreferenced caches go first (LRU)."""

from __future__ import annotations

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.placement import GB
from warmstart.render import nvme_budget, throttling
from warmstart.render.nvme_budget import CacheUsage, EvictionPolicy, Resident

LRU = EvictionPolicy.EVICT_UNREFERENCED_LRU


def resident(key: str, size: int, referenced: bool = False, last_used: str = "2026-01-01T00:00:00Z") -> Resident:
    return Resident(key, size * GB, referenced, last_used, "ns", f"weights-{key}")


def test_a_model_fits_next_to_the_others_only_with_their_bytes_counted() -> None:
    others = [resident("a", 60)]
    assert nvme_budget.fit(30 * GB, 100 * GB, others, EvictionPolicy.NEVER).fits
    tight = nvme_budget.fit(40 * GB, 100 * GB, others, EvictionPolicy.NEVER)
    assert not tight.fits and tight.evict == ()
    assert tight.needed_bytes == placement.required_bytes(40 * GB) and tight.others_bytes == 60 * GB
    assert "60.0 GB used by other caches: does not fit" in tight.message


def test_unreferenced_caches_are_evicted_least_recently_used_first_and_only_as_many_as_needed() -> None:
    old = resident("old", 30, last_used="2026-01-01T00:00:00Z")
    newer = resident("newer", 30, last_used="2026-02-01T00:00:00Z")
    in_use = resident("used", 30, referenced=True, last_used="2025-01-01T00:00:00Z")
    found = nvme_budget.fit(25 * GB, 100 * GB, [newer, in_use, old], LRU)
    assert found.fits and [r.key for r in found.evict] == ["old"]
    both = nvme_budget.fit(50 * GB, 100 * GB, [newer, in_use, old], LRU)
    assert both.fits and [r.key for r in both.evict] == ["old", "newer"]


def test_a_cache_in_use_is_never_evicted() -> None:
    in_use = [resident("a", 50, referenced=True), resident("b", 40, referenced=True)]
    found = nvme_budget.fit(30 * GB, 100 * GB, in_use, LRU)
    assert not found.fits and found.evict == ()
    assert not nvme_budget.fit(30 * GB, 100 * GB, [resident("x", 80)], EvictionPolicy.NEVER).fits


def test_nothing_is_evicted_for_a_model_that_cannot_fit_an_empty_node() -> None:
    found = nvme_budget.fit(120 * GB, 100 * GB, [resident("a", 10)], LRU)
    assert not found.fits and found.evict == ()


def test_residents_are_the_other_caches_ready_or_filling_on_each_node() -> None:
    usages = [
        CacheUsage("own", "ns", "weights-own", 10 * GB, True, ""),
        CacheUsage("a", "ns", "weights-a", 20 * GB, False, "2026-01-01T00:00:00Z"),
        CacheUsage("b", "ns", "weights-b", 30 * GB, True, "", filling=frozenset({"n2"})),
        CacheUsage("unknown-size", "ns", "weights-u", None, False, ""),
    ]
    ready = nodelabels.READY
    labels = {
        "n1": {nodelabels.weights_ready_label("a"): ready, nodelabels.weights_ready_label("own"): ready},
        "n2": {nodelabels.weights_ready_label("unknown-size"): ready},
    }
    found = nvme_budget.residents_by_node(labels, usages, "own")
    assert {node: [r.key for r in rs] for node, rs in found.items()} == {"n1": ["a"], "n2": ["b"]}
    assert nvme_budget.node_usage(10 * GB, found["n1"], 100 * GB) == (30 * GB, 70 * GB)


def test_shared_key_is_in_use_when_any_of_its_caches_is_referenced() -> None:
    usages = [
        CacheUsage("k", "a", "weights-k", 20 * GB, False, "2026-01-01T00:00:00Z"),
        CacheUsage("k", "b", "weights-k", 20 * GB, True, "2026-03-01T00:00:00Z"),
    ]
    found = nvme_budget.residents_by_node({"n": {nodelabels.weights_ready_label("k"): nodelabels.READY}}, usages, "x")
    assert [(r.referenced, r.last_used) for r in found["n"]] == [(True, "2026-03-01T00:00:00Z")]


def test_a_reservation_counts_a_live_cache_on_its_node_and_a_gone_cache_frees_its_bytes() -> None:
    annotations = {
        nodelabels.weights_reserved_annotation("b"): str(60 * GB),
        nodelabels.weights_reserved_annotation("gone"): str(50 * GB),
        nodelabels.weights_reserved_annotation("own"): str(10 * GB),
        nodelabels.weights_reserved_annotation("bad"): "lots",
        "unrelated": "1",
    }
    reserved = nvme_budget.reservations(annotations)
    assert reserved == {"b": 60 * GB, "gone": 50 * GB, "own": 10 * GB}
    usages = [
        CacheUsage("own", "ns", "weights-own", 10 * GB, True, ""),
        CacheUsage("b", "ns", "weights-b", None, True, ""),  # size not in its spec yet: the reservation's bytes count
    ]
    found = nvme_budget.residents_by_node({"n1": {}, "n2": {}}, usages, "own", {"n1": reserved})
    assert {node: [(r.key, r.size_bytes) for r in rs] for node, rs in found.items()} == {"n1": [("b", 60 * GB)]}
    assert not nvme_budget.fit(60 * GB, 100 * GB, found["n1"], EvictionPolicy.NEVER).fits


def test_throttle_default_is_sixteen_nodes_or_a_quarter_of_the_targets() -> None:
    default = throttling.Throttle()
    assert [throttling.limit(default, None, n) for n in (4, 16, 64, 100, 500)] == [16, 16, 16, 25, 125]
    assert throttling.limit(default, 3, 500) == 3
    assert throttling.limit(throttling.Throttle(nodes=1, percent=100), None, 500) == 500
