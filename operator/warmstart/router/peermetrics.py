"""Prometheus metrics of the peer sync: messages sent, received and dropped (by reason), picks taken in, its CPU."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class PeerMetrics:
    """Registered on the router's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sent = Counter(
            "warmstart_router_peer_messages_sent",
            "Sync messages this router sent (each to every peer).",
            registry=registry,
        )
        self.unsent = Counter(
            "warmstart_router_peer_messages_unsent",
            "Sync messages not sent to a peer because it was not connected or not reading (its queue was full).",
            registry=registry,
        )
        self.received = Counter(
            "warmstart_router_peer_messages_received", "Sync messages from peers accepted.", registry=registry
        )
        self._dropped = Counter(
            "warmstart_router_peer_messages_dropped",
            "Sync messages dropped, by reason: forged (bad or missing MAC), malformed, oversized, replayed, stale "
            "(send time too far from this router's clock), flood (over the sender's rate).",
            ["reason"],
            registry=registry,
        )
        self.picks = Counter(
            "warmstart_router_peer_picks",
            "Peers' picks entered into this router's index and shares.",
            registry=registry,
        )
        self.cpu = Counter(
            "warmstart_router_peer_sync_cpu_seconds",
            "CPU time this router spent sending, receiving, checking and applying sync messages.",
            registry=registry,
        )
        self.apply_cpu = Counter(
            "warmstart_router_peer_apply_cpu_seconds",
            "The part of the sync's CPU time spent entering peers' picks into this router's index and shares.",
            registry=registry,
        )
        self.peers = Gauge("warmstart_router_peers", "Peers this router sends to.", registry=registry)
        self.live = Gauge(
            "warmstart_router_peers_live", "Peers heard from within the timeout (their load counts).", registry=registry
        )

    def dropped(self, reason: str) -> Counter:
        return self._dropped.labels(reason)
