"""Placement from the engines' own truth: their KV events and their reported load (``kvEvents: true``).

Every router replica follows every engine's KV events (:mod:`warmstart.router.kvsubscribing`) and
scrapes every engine's load (:mod:`warmstart.router.engineload`), so replicas decide from the same
facts rather than from what each happened to route. For each request:

1. **Match.** The request's token ids (:mod:`warmstart.router.tokenizing`) are keyed in blocks of
   the engine's block size (:func:`warmstart._routing_core.chain_keys`); each replica whose events
   are live is credited with the leading blocks its events (or this router's own picks of the last
   ``speculativeTtlSeconds``) say it holds. A replica that publishes nothing, or a request the
   router cannot tokenize, is matched in the router's own text index instead (the fallback).
2. **Load.** A replica's load is the engine's running + waiting requests, plus this router's picks
   since that scrape was sent; a replica whose metrics cannot be read counts this router's
   in-flight requests instead.
3. **Bound.** A replica is eligible while its load is under ``(1 + balanceEpsilon) x (total load + 1) /
   replicas + balanceSlack`` (one request less to place a prefix it does not hold) and this router's
   in-flight count is under the concurrency cap. All routers read the same engine load, so they
   agree on who is eligible.
4. **Pick.** Among eligible replicas with the longest match, those within one *band* (``max(1,
   balanceEpsilon x mean load)``) of the least loaded count as equally loaded; of those, the ones
   within ``balanceEpsilon x mean`` of the lowest served-request rate the engines report remain (new
   prefixes spread evenly at low load), and the rendezvous order of the prompt's first block picks: a
   prefix cached nowhere goes to a least loaded replica, and routers whose load views differ by a
   request or two still pick the same one. The
   other replicas follow (longest match, load, this router's in-flight count, rendezvous), so a
   refused connection retries the next best. Passing over the deepest match is a spill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warmstart import _routing_core as core
from warmstart.api.routers import RouterConfig
from warmstart.api.strategies import RoutingStrategy
from warmstart.router.engineload import EngineLoadPoller, EngineLoads
from warmstart.router.kvsubscribing import EventPorts, Follower, Observer
from warmstart.router.prefixes import PromptKey
from warmstart.router.strategies import Decision, Snapshot
from warmstart.router.tokenizing import ModelTokenizer

CHARS_PER_TOKEN = 4


class EngineState:
    """The engines' truth as this router sees it: event index, stream follower, load poller, tokenizer."""

    def __init__(self, config: RouterConfig, observer: Observer | None = None) -> None:
        self.config = config
        self.index = core.EventIndex(config.kv_block_size)
        self.loads = EngineLoads()
        self.observer = observer
        self.follower: Follower | None = None
        self.poller: EngineLoadPoller | None = None
        self.tokenizer: ModelTokenizer | None = None
        self.tokenizer_error: str | None = None
        self._replicas: list[str] = []
        self._started = False
        self._load_tokenizer(config.tokenizer_dir)

    def _load_tokenizer(self, directory: str | None) -> None:
        self.tokenizer, self.tokenizer_error = None, None
        if directory:
            try:
                self.tokenizer = ModelTokenizer.from_dir(directory)
            except Exception as exc:  # noqa: BLE001 - a bad tokenizer means "route by text", never a crash
                self.tokenizer_error = f"{type(exc).__name__}: cannot load the tokenizer in {directory}"

    def start(self) -> None:
        """Open the streams and the poller (on the event loop)."""
        self._started = True
        self._reconcile()

    async def stop(self) -> None:
        self._started = False
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None
        if self.poller is not None:
            await self.poller.stop()
            self.poller = None

    def configure(self, config: RouterConfig) -> None:
        """Apply a new configuration: reopen what its event and load settings change."""
        old, self.config = self.config, config
        if old.tokenizer_dir != config.tokenizer_dir:
            self._load_tokenizer(config.tokenizer_dir)
        if old.kv_block_size != config.kv_block_size:
            self.index = core.EventIndex(config.kv_block_size)
            if self.follower is not None:
                self.follower.index = self.index
        stream_knobs = ("kv_events", "kv_events_port", "kv_events_replay_port", "kv_events_ports_relative")
        load_knobs = ("kv_events", "engine_metrics_path", "engine_load_interval_seconds")
        if any(getattr(old, k) != getattr(config, k) for k in stream_knobs) and self.follower is not None:
            follower, self.follower = self.follower, None
            follower.set_replicas([])
        if any(getattr(old, k) != getattr(config, k) for k in load_knobs) and self.poller is not None:
            poller, self.poller = self.poller, None
            poller.set_replicas([])
            poller.cancel()
        self._reconcile()

    def set_replicas(self, urls: list[str]) -> None:
        self._replicas = list(urls)
        self._reconcile()

    def _reconcile(self) -> None:
        if not self._started:
            return
        enabled = self.config.kv_events
        if enabled and self.follower is None:
            ports = EventPorts(
                self.config.kv_events_port, self.config.kv_events_replay_port, self.config.kv_events_ports_relative
            )
            self.follower = Follower(self.index, ports, observer=self.observer)
        if enabled and self.poller is None:
            self.poller = EngineLoadPoller(
                self.loads, self.config.engine_metrics_path, self.config.engine_load_interval_seconds
            )
            self.poller.start()
        if self.follower is not None:
            self.follower.set_replicas(self._replicas if enabled else [])
        if self.poller is not None:
            self.poller.set_replicas(self._replicas if enabled else [])

    def token_keys(self, request: dict[str, Any] | None) -> tuple[int, ...] | None:
        """The router's block keys of the request's token ids; None when it cannot tokenize it."""
        if request is None or self.tokenizer is None:
            return None
        size = self.config.kv_block_size
        tokens = self.tokenizer.request_tokens("", request, self.config.max_blocks * size)
        return None if tokens is None else tuple(core.chain_keys(tokens, size))

    def live(self, replica: str) -> bool:
        return self.follower is not None and self.follower.live(replica)

    def status(self) -> dict[str, Any]:
        streams = self.follower.streams if self.follower is not None else {}
        return {
            "enabled": self.config.kv_events,
            "tokenizer": "loaded" if self.tokenizer is not None else (self.tokenizer_error or "none"),
            "indexEntries": self.index.total_entries(),
            "orphanBlocks": self.index.orphans,
            "blockSizeMismatches": self.index.mismatched,
            "replicas": {
                url: {
                    "events": streams[url].to_dict() if url in streams else None,
                    "engineLoad": _load_dict(self.loads, url),
                    "indexBlocks": self.index.blocks(url),
                }
                for url in self._replicas
            },
        }


def _load_dict(loads: EngineLoads, url: str) -> dict[str, float | None] | None:
    reported = loads.reported(url)
    if reported is None:
        return None
    return {"running": reported.running, "waiting": reported.waiting, "kvCacheUsage": reported.kv_usage}


@dataclass(frozen=True, slots=True)
class Match:
    """How a decision matched: tokens credited to the choice, and whether the events or the text index said so."""

    tokens: int
    by_events: bool


class EngineAwarePolicy:
    """Longest engine-reported prefix, then least engine-reported load, rendezvous ties (see module doc); the
    routing core's :class:`~warmstart._routing_core.EnginePicker` decides."""

    strategy = RoutingStrategy.PREFIXAWARE

    def __init__(self, config: RouterConfig, engines: EngineState, clock: Callable[[], float] = time.monotonic):
        self.cap = config.max_concurrent_requests
        self.engines = engines
        self.text = core.PrefixIndex(config.index_capacity_blocks)
        self.picker = core.EnginePicker(
            cap=self.cap,
            balance_epsilon=config.balance_epsilon,
            balance_slack=config.balance_slack,
            block_chars=config.block_chars,
            chars_per_token=CHARS_PER_TOKEN,
            ttl=config.speculative_ttl_seconds,
            events=engines.index,
            text=self.text,
        )
        self.clock = clock
        self.last = Match(0, False)

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        replicas = snapshot.replicas
        if not replicas:
            return Decision(())
        now = self.clock()
        engines = self.engines
        picker = self.picker
        if picker.events is not engines.index:  # the block size changed: a new event index
            picker.events = engines.index
        names = [r.name for r in replicas]
        loads = engines.loads
        candidates, tokens, by_events, spilled = picker.choose(
            names,
            [r.inflight for r in replicas],
            [r.peers for r in replicas],
            [engines.live(name) for name in names],
            key.token_blocks,
            key.blocks,
            [loads.load(name, now) for name in names],
            [loads.rate(name) for name in names],
            now,
        )
        self.last = Match(tokens, by_events)
        return Decision(tuple(candidates), matched_blocks=0, spilled=spilled)

    def placed(self, replica: str, key: PromptKey) -> None:
        now = self.clock()
        self.picker.placed(replica, key.blocks, key.token_blocks, now)
        self.engines.loads.picked(replica, now)

    def forget(self, replica: str) -> None:
        self.picker.forget(replica)
        self.engines.loads.forget(replica)
