"""The router's configuration: one validated model, loadable from a file or a ConfigMap's `router.yaml`.

The operator renders this model (dumped by alias, camelCase) into the ConfigMap key
``router.yaml``; the router reads it back with :meth:`RouterConfig.from_yaml`. It is the contract
between the two, so it lives in the API. Every knob has a documented default, so an empty document
is a valid configuration (the ``random`` strategy).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from warmstart.api import strategies
from warmstart.api.strategies import RoutingStrategy, RoutingStrategyField

#: The ConfigMap data key that holds the router configuration.
CONFIGMAP_KEY = "router.yaml"


def proxy_networks(entries: Iterable[str], what: str) -> tuple[str, ...]:
    """Each entry an address or a CIDR without host bits (``10.0.0.1/8`` is refused: it would trust a /8), normalised;
    ValueError naming ``what`` otherwise."""
    try:
        return tuple(str(ipaddress.ip_network(entry.strip())) for entry in entries)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


class RouterConfig(BaseModel):
    """Routing strategy and knobs for one endpoint's router (ConfigMap key ``router.yaml``)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )

    strategy: RoutingStrategyField = Field(
        default=RoutingStrategy.RANDOM,
        validation_alias=AliasChoices("strategy", "routingStrategy"),
        description="Routing strategy: random, roundrobin, leastoutstanding, session, prefixaware, "
        "kvaware (served by prefixaware).",
    )
    """Routing strategy; any accepted spelling (``warmstart.api.strategies.SPELLINGS``) is normalised."""

    block_chars: int = Field(default=256, ge=16, le=65536)
    """Prefix block size in characters of the rendered prompt (about 64 tokens at ~4 chars/token)."""

    max_blocks: int = Field(default=128, ge=1, le=4096)
    """At most this many leading blocks of a prompt are hashed (default 128 blocks ~ 8k tokens)."""

    index_capacity_blocks: int = Field(default=16384, ge=1)
    """Per-replica capacity of the router's approximate prefix index, in blocks (LRU beyond it).
    Match it to the engine's KV cache: blocks x blockChars / 4 ~ tokens of KV cache."""

    home_blocks: int = Field(default=4, ge=1)
    """Leading blocks whose hash gives a new prefix its rendezvous home and its spill order."""

    home_choices: int = Field(default=1, ge=1, le=8)
    """A prefix cached nowhere goes to the least loaded (by this router's own in-flight counts) of
    its first ``homeChoices`` eligible rendezvous candidates. The default 1 sends it to its first
    eligible rendezvous candidate, a function of the prefix and the replica set only, so every
    router replica picks the same home; above 1 routers that see different loads disagree."""

    prefill_aware: bool = False
    """Use the estimated prefill backlog (uncached prompt characters in flight that have not
    produced a first byte yet) for p99 TTFT: it breaks ties between replicas holding the same
    prefix, and a prompt cached nowhere whose home is busy prefilling goes to its next rendezvous
    candidate when that one is idle, instead of queueing a cold prefill behind another. For a
    single router replica (p99 TTFT 1.3-1.6x lower on prefix workloads in the offline replay).
    Off by default: each router sees only its own backlog, so several routers place a new
    prefix on different replicas more often (hit ratio 0.03-0.04 lower with 2 routers), and it
    splits a prefix's traffic across its holders (in the scale event 28% of groups changed
    majority replica with it against 3% without)."""

    load_epsilon: float = Field(default=0.5, ge=0.0, le=10.0)
    """In-flight bound: a replica is eligible while in-flight < ceil((1+eps) x mean in-flight). It
    only guards against bursts now (formerly 0.2, when it was also the balance): the request-share
    bound (``balanceEpsilon``) keeps the balance, and a tight in-flight bound computed from one
    router replica's small counts spilled prefixes at random."""

    load_min_ceiling: int = Field(default=8, ge=1)
    """The in-flight ceiling is never below this many requests, so a few requests of one prefix
    may overlap on its replica at low load (where ceil((1+eps) x mean) would be 1 or 2). With the
    request-share bound keeping the balance, 8 is a burst guard only (before that bound, this floor
    let one replica take most requests at modest load). At 4 (the previous default) Poisson bursts
    spilled prefixes off their homes at low load, and each router of several, counting only its
    own in-flight requests, spilled more: copies of prefixes without better balance."""

    balance_epsilon: float = Field(default=0.15, ge=0.0, le=10.0)
    """Request-share bound of ``prefixaware``: a replica is eligible while its share of this router's
    recent requests is below (1 + balanceEpsilon) x the mean share plus ``balanceSlack`` requests
    (one fewer for a replica that lacks the prompt's prefix; none at all to place a new chat
    conversation on it). It bounds max/mean request share at every load level, where an in-flight
    ceiling cannot (at low load every replica has 0-2 requests in flight). Formerly 0.2: with the
    slack the bound itself sat at 1.31 x the mean in a 256-request run."""

    balance_window: int = Field(default=512, ge=2)
    """Requests over which the shares are counted (exponentially decayed per request, not per second)."""

    balance_slack: float = Field(default=3.0, ge=1.0)
    """Requests a replica that holds part of the prompt may run ahead of the share bound before the
    request spills (one fewer to place a new prefix on it): keeping a prefix where it is cached is
    worth a little imbalance, and a little slack keeps router replicas' decisions alike."""

    max_concurrent_requests: int | None = Field(default=None, ge=1)
    """Hard per-replica concurrency cap of this router (``worker.requestLimits.maxConcurrentRequests``):
    requests beyond it wait in the overflow queue; None = no cap and no queue."""

    max_queue_size: int = Field(default=64, ge=0)
    """Requests that wait (FIFO) for a free replica slot when every replica is at the cap
    (``worker.requestLimits.maxQueueSize``); beyond it the client gets ``overflowStatusCode``."""

    overflow_status_code: int = Field(default=429, ge=400, le=599)
    """Status answered, with ``Retry-After``, when the cap is reached and the queue is full."""

    session_header: str = "x-session-id"
    """Header whose value is the session key for the ``session`` strategy."""

    session_field: str = "user"
    """Top-level JSON body field used as the session key when the header is absent."""

    connect_timeout_seconds: float = Field(default=2.0, gt=0)
    """Time allowed to open a connection to a replica."""

    read_timeout_seconds: float = Field(default=300.0, gt=0)
    """Longest silence allowed while reading a replica's response (between chunks)."""

    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Largest request body accepted; larger bodies get 413."""

    max_buffered_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Request body bytes the router holds at once, over all requests (read, queued or being sent);
    a request that would exceed it gets 503 with ``Retry-After``."""

    max_buffered_bytes_per_client: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Request body bytes one client address holds at once (its share of ``maxBufferedBytes``);
    a request that would exceed it gets 429 with ``Retry-After``. Behind a proxy every client is that
    proxy's address unless it is in ``trustedProxies`` (then the client is the one it forwards for); behind
    one that keeps no ``X-Forwarded-For``, raise it (up to ``maxBufferedBytes``)."""

    max_bodies_per_client: int = Field(default=64, ge=1)
    """Request bodies one client address sends at once (from a request's headers until its body is
    complete); one more gets 429 with ``Retry-After``."""

    trusted_proxies: tuple[str, ...] = Field(default=(), max_length=256)
    """Addresses or CIDRs of the proxies in front of the router (the chart's ``router.trustedProxies``,
    filled by the operator; not an endpoint's knob). From one of them, the client whose shares a request
    counts against is the first untrusted hop of ``X-Forwarded-For`` read from the right
    (:mod:`warmstart.router.forwarding`); from any other peer, or without a readable header, the peer.
    Empty: the peer is always the client."""

    body_timeout_seconds: float = Field(default=30.0, gt=0)
    """Time allowed to receive a whole request body once its headers are in; slower clients get 408."""

    write_timeout_seconds: float = Field(default=60.0, gt=0)
    """Longest time a client may leave its reply unread while the router has more of it to write
    (the client's socket full); then the connection is closed and its replica slot released."""

    warm_nodes: tuple[str, ...] | None = None
    """Names of the nodes where this endpoint's caches are ready (for the operator to fill). With it,
    requests are counted by the placement of the replica that served them: warm (its pod's node,
    from the EndpointSlice, is listed), cold (not listed) or unknown; without it, all are unknown."""

    retries: int = Field(default=1, ge=0, le=3)
    """How many further candidates are tried when a replica refuses the connection."""

    kv_events: bool = False
    """Route ``prefixaware`` from the engines' own truth: follow every replica's KV-cache events (vLLM's
    ZMQ stream) and read every replica's load from its metrics, so all router replicas decide from the
    same facts. Replicas that publish no events are routed by the text index, still by engine load."""

    kv_events_port: int = Field(default=5557, ge=-65535, le=65535)
    """Port of each replica's KV-event PUB socket (vLLM's ``--kv-events-config`` ``endpoint``)."""

    kv_events_replay_port: int | None = Field(default=5558, ge=-65535, le=65535)
    """Port of each replica's replay ROUTER socket (``replay_endpoint``); none = gaps are not replayed."""

    kv_events_ports_relative: bool = False
    """The two ports are offsets from each replica's HTTP port (many replicas on one address, as a local sim)."""

    kv_block_size: int = Field(default=16, ge=1, le=4096)
    """The engines' KV block size in tokens (vLLM's ``--block-size``, 16 by default): events of another
    size are not indexed."""

    tokenizer_dir: str | None = Field(default=None, max_length=4096)
    """Directory of the model's ``tokenizer.json`` (and ``tokenizer_config.json`` with its chat template):
    the router keys requests by the same token ids as the engine. Without it, every request is routed
    by the text index."""

    speculative_ttl_seconds: float = Field(default=2.0, ge=0.0, le=60.0)
    """How long this router's own picks count as cached on the picked replica before its events confirm them."""

    engine_metrics_path: str = Field(default="/metrics", pattern=r"^/[A-Za-z0-9_\-./]*$", max_length=256)
    """Path of each replica's Prometheus metrics (engine-reported load), on the replica's port."""

    engine_load_interval_seconds: float = Field(default=0.2, ge=0.02, le=60.0)
    """How often each replica's metrics are read."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        return proxy_networks(entries, "trustedProxies")

    @property
    def effective_strategy(self) -> RoutingStrategy:
        """The strategy actually served (``kvaware`` -> ``prefixaware``)."""
        return strategies.served(self.strategy)

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data, camelCase keys (what the ConfigMap holds)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_yaml(self) -> str:
        """The configuration as YAML with camelCase keys."""
        text: str = yaml.safe_dump(self.to_dict(), sort_keys=True)
        return text

    @classmethod
    def from_yaml(cls, text: str) -> RouterConfig:
        """Parse YAML or JSON text (camelCase or snake_case keys); empty text -> defaults."""
        try:
            data = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            raise ValueError(f"router configuration is not valid YAML: {type(exc).__name__}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError("router configuration must be a mapping")
        return cls.model_validate(data)

    @classmethod
    def from_file(cls, path: str | Path) -> RouterConfig:
        """Read a YAML or JSON file."""
        return cls.from_yaml(Path(path).read_text(encoding="utf-8"))

    @classmethod
    def from_configmap_data(cls, data: dict[str, str] | None) -> RouterConfig:
        """Read the ``router.yaml`` key of a ConfigMap's data (missing key -> defaults)."""
        return cls.from_yaml((data or {}).get(CONFIGMAP_KEY, ""))
