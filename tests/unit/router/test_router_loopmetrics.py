"""The request path's metrics expose exactly what prometheus_client's Counter, Gauge and Histogram would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from warmstart.router.loopmetrics import LoopCounter, LoopGauge, LoopHistogram


def _exposition(registry: CollectorRegistry) -> str:
    """The text exposition without the creation timestamps (they differ between two registries)."""
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", generate_latest(registry).decode())


def test_exposition_matches_prometheus_client() -> None:
    def fill(registry: CollectorRegistry, loop: bool) -> None:
        counter = (LoopCounter if loop else Counter)("reqs", "Requests.", ["strategy", "outcome"], registry=registry)
        gauge = (LoopGauge if loop else Gauge)("inflight", "In flight.", ["replica"], registry=registry)
        buckets = (0.001, 0.01, 0.1)
        if loop:
            by_replica = LoopHistogram("ttft_seconds", "TTFT.", ["replica"], registry=registry, buckets=buckets)
            plain = LoopHistogram("added_seconds", "Added.", [], registry=registry, buckets=buckets).labels()
        else:
            by_replica = Histogram("ttft_seconds", "TTFT.", ["replica"], registry=registry, buckets=buckets)
            plain = Histogram("added_seconds", "Added.", registry=registry, buckets=buckets)
        counter.labels("prefixaware", "ok").inc()
        counter.labels("prefixaware", "ok").inc(2.5)
        counter.labels("random", "error").inc()
        gauge.labels("http://a:1").set(3)
        gauge.labels("http://b:1").set(0)
        for value in (0.0005, 0.001, 0.05, 7.0):  # below, on, between and above the bounds
            by_replica.labels("http://a:1").observe(value)
            plain.observe(value)

    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fill(ours, loop=True)
    fill(theirs, loop=False)
    assert _exposition(ours) == _exposition(theirs)


def test_removed_series_leave_the_exposition() -> None:
    registry = CollectorRegistry()
    gauge = LoopGauge("inflight", "In flight.", ["replica"], registry=registry)
    gauge.labels("http://a:1").set(1)
    gauge.labels("http://b:1").set(2)
    gauge.remove("http://a:1")
    gauge.remove("http://never:1")  # no error for a series that does not exist
    text = generate_latest(registry).decode()
    assert 'replica="http://b:1"' in text and 'replica="http://a:1"' not in text


def test_counters_only_go_up_and_label_counts_are_checked() -> None:
    counter = LoopCounter("reqs", "Requests.", ["outcome"], registry=CollectorRegistry())
    with pytest.raises(ValueError):
        counter.labels("ok").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("ok", "extra")
