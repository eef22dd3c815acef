"""Prometheus metrics of one router instance, in its own registry (no process-wide singletons).

The series the request path updates are :mod:`warmstart.router.loopmetrics` families (plain
numbers on the event loop); the rest are prometheus_client's own metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from warmstart import _routing_core as core
from warmstart.router.loopmetrics import CounterValue, GaugeValue, HistogramValue, LoopCounter, LoopGauge, LoopHistogram

#: Approximate characters per token, used only to express matched prefixes in tokens.
CHARS_PER_TOKEN = 4

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_FAST_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class CorePanics(Collector):
    """``warmstart_router_core_panics_total``: panics inside the routing core, read from the core at scrape time."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "warmstart_router_core_panics",
            "Panics inside the compiled routing core, each turned into an error for its request (a 500 from the "
            "proxy, the picker's failure mode) or a dropped KV-event batch; counted for the whole process.",
            value=core.panics(),
        )


class RouterMetrics:
    """Requests, in-flight, spills, matched-prefix tokens and latency histograms."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = LoopCounter(
            "warmstart_router_requests",
            "Requests routed, by strategy, replica and outcome (ok, error, aborted, refused, no_replica, bad_request).",
            ["strategy", "replica", "outcome"],
            registry=self.registry,
        )
        self.inflight = LoopGauge(
            "warmstart_router_inflight",
            "Requests in flight per replica (exact; decremented in one place).",
            ["replica"],
            registry=self.registry,
        )
        self.spills = LoopCounter(
            "warmstart_router_spills",
            "Requests sent past their best replica because it was at the concurrency cap or load bound.",
            ["strategy"],
            registry=self.registry,
        )
        self.prefix_tokens = LoopCounter(
            "warmstart_router_prefix_tokens",
            "Prompt tokens routed (kind=prompt) and those the router expects cached (kind=matched); "
            "matched/prompt is the router's estimate of the prefix hit ratio. Tokens ~ chars/4.",
            ["kind"],
            registry=self.registry,
        )
        self.decision_seconds: HistogramValue = LoopHistogram(
            "warmstart_router_decision_seconds",
            "Time to parse the body, hash the prefix and choose a replica.",
            [],
            registry=self.registry,
            buckets=_FAST_BUCKETS,
        ).labels()
        self.added_seconds: HistogramValue = LoopHistogram(
            "warmstart_router_added_latency_seconds",
            "Time the router adds before the upstream request is sent (read, parse, decide, connect).",
            [],
            registry=self.registry,
            buckets=_FAST_BUCKETS,
        ).labels()
        self.index_entries = Gauge(
            "warmstart_router_index_entries",
            "Block hashes held by the prefix index across replicas (measured ~400 bytes per entry in CPython).",
            registry=self.registry,
        )
        self.replicas = Gauge("warmstart_router_replicas", "Replicas currently known.", registry=self.registry)
        self.config_reloads = Counter(
            "warmstart_router_config_reloads", "Configuration changes applied.", registry=self.registry
        )
        self.config_errors = Counter(
            "warmstart_router_config_errors",
            "Configuration documents rejected as invalid (the previous configuration stays in force).",
            registry=self.registry,
        )
        self.config_valid = Gauge(
            "warmstart_router_config_valid",
            "1 while the latest configuration document was valid, 0 after a rejected one.",
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "warmstart_router_queue_depth",
            "Requests waiting in the overflow queue for a replica under the concurrency cap.",
            registry=self.registry,
        )
        self.overflows = Counter(
            "warmstart_router_overflows",
            "Requests refused with overflowStatusCode because every replica was at the cap and the queue was full.",
            registry=self.registry,
        )
        self.ttft_seconds = LoopHistogram(
            "warmstart_router_ttft_seconds",
            "Time from the request's arrival at the router to the first byte of the replica's reply "
            "(streaming or not), per replica.",
            ["replica"],
            registry=self.registry,
            buckets=_TTFT_BUCKETS,
        )
        self.placements = LoopCounter(
            "warmstart_router_placement_requests",
            "Requests forwarded, by the placement of the replica's node: warm (listed in warmNodes), cold, unknown.",
            ["placement"],
            registry=self.registry,
        )
        self.registry.register(CorePanics())
        self.prompt_tokens = self.prefix_tokens.labels("prompt")
        self.matched_tokens = self.prefix_tokens.labels("matched")

    def request(self, strategy: str, replica: str, outcome: str) -> CounterValue:
        """The request counter of one (strategy, replica, outcome)."""
        return self.requests.labels(strategy, replica, outcome)

    def spill(self, strategy: str) -> CounterValue:
        return self.spills.labels(strategy)

    def inflight_of(self, replica: str) -> GaugeValue:
        return self.inflight.labels(replica)

    def placement(self, placement: str) -> CounterValue:
        return self.placements.labels(placement)

    def ttft_of(self, replica: str) -> HistogramValue:
        return self.ttft_seconds.labels(replica)

    def forget_replica(self, replica: str) -> None:
        """Drop the in-flight and TTFT series of a replica that left."""
        self.inflight.remove(replica)
        self.ttft_seconds.remove(replica)
