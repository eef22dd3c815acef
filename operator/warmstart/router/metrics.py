"""Prometheus metrics of one router instance, in its own registry (no process-wide singletons)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Approximate characters per token, used only to express matched prefixes in tokens.
CHARS_PER_TOKEN = 4

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_FAST_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class RouterMetrics:
    """Requests, in-flight, spills, matched-prefix tokens and latency histograms."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "warmstart_router_requests",
            "Requests routed, by strategy, replica and outcome (ok, error, aborted, refused, no_replica, bad_request).",
            ["strategy", "replica", "outcome"],
            registry=self.registry,
        )
        self.inflight = Gauge(
            "warmstart_router_inflight",
            "Requests in flight per replica (exact; decremented in one place).",
            ["replica"],
            registry=self.registry,
        )
        self.spills = Counter(
            "warmstart_router_spills",
            "Requests sent past their best replica because it was at the concurrency cap or load bound.",
            ["strategy"],
            registry=self.registry,
        )
        self.prefix_tokens = Counter(
            "warmstart_router_prefix_tokens",
            "Prompt tokens routed (kind=prompt) and those the router expects cached (kind=matched); "
            "matched/prompt is the router's estimate of the prefix hit ratio. Tokens ~ chars/4.",
            ["kind"],
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "warmstart_router_decision_seconds",
            "Time to parse the body, hash the prefix and choose a replica.",
            buckets=_FAST_BUCKETS,
            registry=self.registry,
        )
        self.added_seconds = Histogram(
            "warmstart_router_added_latency_seconds",
            "Time the router adds before the upstream request is sent (read, parse, decide, connect).",
            buckets=_FAST_BUCKETS,
            registry=self.registry,
        )
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
        self.ttft_seconds = Histogram(
            "warmstart_router_ttft_seconds",
            "Time from the request's arrival at the router to the first byte of the replica's reply "
            "(streaming or not), per replica.",
            ["replica"],
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.placements = Counter(
            "warmstart_router_placement_requests",
            "Requests forwarded, by the placement of the replica's node: warm (listed in warmNodes), cold, unknown.",
            ["placement"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, ...], Any] = {}
        self.prompt_tokens = self.prefix_tokens.labels("prompt")
        self.matched_tokens = self.prefix_tokens.labels("matched")

    def request(self, strategy: str, replica: str, outcome: str) -> Any:
        """The labelled request counter (children are cached: ``labels()`` is slow on the hot path)."""
        key = ("requests", strategy, replica, outcome)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(strategy, replica, outcome)
        return child

    def spill(self, strategy: str) -> Any:
        key = ("spills", strategy)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.spills.labels(strategy)
        return child

    def inflight_of(self, replica: str) -> Any:
        key = ("inflight", replica)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.inflight.labels(replica)
        return child

    def placement(self, placement: str) -> Any:
        key = ("placement", placement)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.placements.labels(placement)
        return child

    def ttft_of(self, replica: str) -> Any:
        key = ("ttft", replica)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.ttft_seconds.labels(replica)
        return child

    def forget_replica(self, replica: str) -> None:
        """Drop the in-flight and TTFT series of a replica that left."""
        if self._children.pop(("inflight", replica), None) is not None:
            self.inflight.remove(replica)
        if self._children.pop(("ttft", replica), None) is not None:
            self.ttft_seconds.remove(replica)
