"""PrefixIndex: longest-prefix matching per replica, LRU bound, forgetting a replica."""

from __future__ import annotations

from warmstart._routing_core import PrefixIndex


def test_match_counts_leading_blocks_per_replica() -> None:
    index = PrefixIndex(capacity_blocks=100)
    index.record("a", (1, 2, 3))
    index.record("b", (1, 2))
    index.record("c", (9,))
    assert index.match((1, 2, 3, 4), ["a", "b", "c"]) == {"a": 3, "b": 2}


def test_a_hole_stops_the_match() -> None:
    index = PrefixIndex(capacity_blocks=100)
    index.record("a", (1, 3))
    assert index.match((1, 2, 3), ["a"]) == {"a": 1}


def test_only_listed_replicas_are_considered() -> None:
    index = PrefixIndex(capacity_blocks=100)
    index.record("gone", (1, 2))
    assert index.match((1, 2), ["other"]) == {}


def test_lru_capacity_bounds_each_replica_and_evicts_oldest() -> None:
    index = PrefixIndex(capacity_blocks=3)
    index.record("a", (1, 2, 3))
    index.record("a", (1,))  # touch 1: now 2 is the oldest
    index.record("a", (7,))
    assert index.blocks("a") == 3
    assert index.match((1,), ["a"]) == {"a": 1}
    assert index.match((1, 2), ["a"]) == {"a": 1}


def test_forget_drops_the_replica_everywhere() -> None:
    index = PrefixIndex(capacity_blocks=10)
    index.record("a", (1, 2))
    index.record("b", (1, 2))
    index.forget("a")
    assert index.match((1, 2), ["a", "b"]) == {"b": 2}
    assert index.total_entries() == 2


def test_memory_is_bounded_by_replicas_times_capacity() -> None:
    index = PrefixIndex(capacity_blocks=50)
    for replica in ("a", "b", "c"):
        for start in range(0, 1000, 10):
            index.record(replica, tuple(range(start, start + 10)))
    assert index.total_entries() == 150
