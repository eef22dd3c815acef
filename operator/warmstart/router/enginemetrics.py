"""Prometheus metrics of the engine-truth path: KV-event lag, gaps, replays, drops, and requests routed by fallback."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class EngineMetrics:
    """Registered on the router's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Histogram(
            "warmstart_router_kv_event_lag_seconds",
            "Time from an engine publishing a KV-event batch to this router applying it (clocks of two hosts).",
            buckets=_LAG_BUCKETS,
            registry=registry,
        )
        self.stream_faults = Counter(
            "warmstart_router_kv_event_faults",
            "KV-event stream faults by kind: gap, replay (a gap or a join filled), decode_error, "
            "drop:restart, drop:unreplayable_gap, drop:cleared (a replica's entries dropped).",
            ["kind"],
            registry=registry,
        )
        self.routed = Counter(
            "warmstart_router_kv_routed",
            "Requests routed with kvEvents on, by what matched their choice: events (the engine's KV events), "
            "text (the text index: no events from that replica, or a request the router could not tokenize).",
            ["source"],
            registry=registry,
        )
        self.untokenized = Counter(
            "warmstart_router_kv_untokenized",
            "Requests the router could not tokenize (no tokenizer, a body too large to keep, images, a "
            "template error): routed by the text index.",
            registry=registry,
        )

    def observe(self, replica: str, what: str, value: float) -> None:
        """The stream follower's observer: lag samples and faults (per kind, not per replica)."""
        if what == "lag":
            self.lag.observe(value)
        else:
            self.stream_faults.labels(what).inc(value)
