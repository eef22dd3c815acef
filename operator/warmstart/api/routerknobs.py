"""The router knobs an endpoint sets (``intelligentRoutingSpec.routerConfig``): each one reaches the router's ConfigMap.

Every field is optional; an unset field keeps the router's documented default
(:class:`warmstart.api.routers.RouterConfig`, which holds the same bounds). Knobs that come from
elsewhere in the spec (``strategy``; ``maxConcurrentRequests``, ``maxQueueSize`` and
``overflowStatusCode`` from ``worker.requestLimits``; ``warmNodes`` and ``tokenizerDir`` from the
operator) are not here.
"""

from __future__ import annotations

from pydantic import Field

from warmstart.api.base import ApiModel


class RouterKnobs(ApiModel):
    """warmstart extension: the router's tuning knobs (see docs/router.md, "Configuration")."""

    block_chars: int | None = Field(default=None, ge=16, le=65536, description="Text-index block size in characters.")
    max_blocks: int | None = Field(default=None, ge=1, le=4096, description="Leading blocks hashed per prompt.")
    index_capacity_blocks: int | None = Field(
        default=None, ge=1, le=16_777_216, description="Per-replica capacity of the text index, in blocks."
    )
    home_blocks: int | None = Field(
        default=None, ge=1, le=4096, description="Leading blocks whose hash gives a new prefix its rendezvous home."
    )
    home_choices: int | None = Field(
        default=None, ge=1, le=8, description="A prefix cached nowhere goes to the least loaded of this many homes."
    )
    prefill_aware: bool | None = Field(
        default=None, description="Prefer the shortest estimated prefill backlog (for one router replica)."
    )
    load_epsilon: float | None = Field(default=None, ge=0.0, le=10.0, description="Burst ceiling factor.")
    load_min_ceiling: int | None = Field(default=None, ge=1, le=100_000, description="Lowest burst ceiling.")
    balance_epsilon: float | None = Field(default=None, ge=0.0, le=10.0, description="Request-share bound factor.")
    balance_window: int | None = Field(
        default=None, ge=2, le=1_000_000, description="Requests over which shares are counted."
    )
    balance_slack: float | None = Field(
        default=None, ge=1.0, le=1000.0, description="Requests a holder of the prompt may run over the share bound."
    )
    session_header: str | None = Field(
        default=None, max_length=128, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", description="Session key header."
    )
    session_field: str | None = Field(default=None, max_length=128, description="Session key body field.")
    connect_timeout_seconds: float | None = Field(default=None, gt=0, le=600, description="Connect timeout.")
    read_timeout_seconds: float | None = Field(default=None, gt=0, le=86_400, description="Longest read silence.")
    max_body_bytes: int | None = Field(default=None, ge=1024, le=1 << 30, description="Request body limit.")
    max_buffered_bytes: int | None = Field(
        default=None, ge=1024, le=1 << 34, description="Request body bytes held at once over all requests."
    )
    body_timeout_seconds: float | None = Field(default=None, gt=0, le=3600, description="Time to receive a body.")
    max_buffered_bytes_per_client: int | None = Field(
        default=None, ge=1024, le=1 << 34, description="Request body bytes one client address holds at once."
    )
    max_bodies_per_client: int | None = Field(
        default=None, ge=1, le=100_000, description="Request bodies one client address sends at once."
    )
    write_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="Longest time a client may leave one reply unread, all pauses together.",
    )
    retries: int | None = Field(default=None, ge=0, le=3, description="Further candidates after a refused connect.")
    kv_events: bool | None = Field(
        default=None,
        description="Route from the engines' KV-cache events and reported load; the operator adds vLLM's "
        "--kv-events-config to the model container.",
    )
    kv_events_port: int | None = Field(default=None, ge=1, le=65535, description="Engines' KV-event PUB port.")
    kv_events_replay_port: int | None = Field(
        default=None, ge=1, le=65535, description="Engines' KV-event replay port."
    )
    kv_block_size: int | None = Field(
        default=None, ge=1, le=4096, description="Engines' KV block size in tokens (vLLM --block-size)."
    )
    speculative_ttl_seconds: float | None = Field(
        default=None, ge=0.0, le=60.0, description="How long the router's own picks count as cached."
    )
    engine_metrics_path: str | None = Field(
        default=None, max_length=256, pattern=r"^/[A-Za-z0-9_\-./]*$", description="Engines' metrics path."
    )
    engine_load_interval_seconds: float | None = Field(
        default=None, ge=0.02, le=60.0, description="How often engines' metrics are read."
    )

    def chosen(self) -> dict[str, object]:
        """The knobs set, by their RouterConfig field names."""
        return self.model_dump(exclude_none=True)
