"""The router's live state: configuration, fleet and policy, and the one place that changes them.

Discovery and config reload call :meth:`Router.apply_config` and :meth:`Router.set_backends`;
the proxy calls :meth:`Router.decide`. Everything runs on the event loop, so no locks.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from warmstart import _routing_core as core
from warmstart.api.routers import RouterConfig
from warmstart.api.strategies import RoutingStrategy
from warmstart.router import strategies
from warmstart.router.admission import Admission
from warmstart.router.bodies import ParsedBody
from warmstart.router.enginemetrics import EngineMetrics
from warmstart.router.enginerouting import EngineAwarePolicy, EngineState
from warmstart.router.metrics import CHARS_PER_TOKEN, RouterMetrics
from warmstart.router.prefixes import PromptKey, key_of
from warmstart.router.replicas import Fleet, Replica

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Routed:
    """A routing decision for one request, with its prompt key."""

    key: PromptKey
    decision: strategies.Decision


class PickSharing(Protocol):
    """Router replicas sharing their picks (:mod:`warmstart.router.peersync`), as the router calls it."""

    def picked(self, replica: str, key: PromptKey) -> None:
        """This router placed a request on ``replica``."""
        ...

    def changed(self) -> None:
        """A slot was taken or freed."""
        ...

    def status(self) -> dict[str, object]: ...


_NO_PEERS: Mapping[str, int] = {}


class Router:
    """Configuration + fleet + policy; the proxy asks it where to send each request."""

    def __init__(
        self,
        config: RouterConfig | None = None,
        backends: list[str] | None = None,
        metrics: RouterMetrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.metrics = metrics or RouterMetrics()
        self.fleet = Fleet()
        self._rng = rng or random.Random()
        self.config = config or RouterConfig()
        self.engine_metrics = EngineMetrics(self.metrics.registry)
        self.engines = EngineState(self.config, observer=self.engine_metrics.observe)
        """The engines' KV events and load (used when ``kvEvents`` is on); started by :meth:`start`."""
        self.sharing: PickSharing | None = None
        self.peer_inflight: Mapping[str, int] = _NO_PEERS
        """Requests the router's live peers have in flight, by replica (:meth:`share_picks`)."""
        self.record_pick: Callable[[str, PromptKey], None] = lambda replica, key: None
        """The policy's own bookkeeping of a placement: a peer's pick is entered through it."""
        self.policy: strategies.Policy = self._build_policy(self.config)
        self._note_kvaware(self.config)
        self.admission = Admission(self.free_slots)
        self.config_error: dict[str, str] | None = None
        """The last configuration that was rejected (source and reason), until a valid one applies."""
        self.metrics.queue_depth.set_function(lambda: self.admission.depth)
        self.metrics.config_valid.set(1)
        self.set_backends(backends or [])

    def _build_policy(self, config: RouterConfig) -> strategies.Policy:
        policy: strategies.Policy
        if config.kv_events and config.effective_strategy is RoutingStrategy.PREFIXAWARE:
            policy = EngineAwarePolicy(config, self.engines)
        else:
            policy = strategies.build(config, self._rng)
        return self._tap(policy)

    def _tap(self, policy: strategies.Policy) -> strategies.Policy:
        """Remember the policy's own ``placed`` (peers' picks go there); while picks are shared, its ``placed`` also
        tells the peers (the proxy and the picker call ``policy.placed`` as they take a slot)."""
        own = type(policy).placed.__get__(policy)  # the class's method, even when the instance was tapped before
        self.record_pick = own
        sharing = self.sharing
        if sharing is None:
            vars(policy).pop("placed", None)
            return policy

        def placed(replica: str, key: PromptKey) -> None:
            own(replica, key)
            sharing.picked(replica, key)

        policy.placed = placed  # type: ignore[method-assign]
        return policy

    def share_picks(self, sharing: PickSharing | None, peer_inflight: Mapping[str, int]) -> None:
        """Tell ``sharing`` every pick and slot change, and count ``peer_inflight`` in the load; None: stop."""
        self.sharing = sharing
        self.peer_inflight = peer_inflight if sharing is not None else _NO_PEERS
        self.admission.freed = sharing.changed if sharing is not None else None
        self._tap(self.policy)

    def fleet_urls(self) -> frozenset[str]:
        """The current replicas' URLs (what a peer may name)."""
        return frozenset(self.fleet.urls())

    def start(self) -> None:
        """Start following the engines (on the event loop; a no-op while ``kvEvents`` is off)."""
        self.engines.start()

    async def stop(self) -> None:
        await self.engines.stop()

    @property
    def strategy(self) -> RoutingStrategy:
        """The configured strategy (as written; see ``policy.strategy`` for the one served)."""
        return self.config.strategy

    def free_slots(self) -> int | None:
        """Replica slots under the concurrency cap, over the fleet; None when there is no cap."""
        cap = self.config.max_concurrent_requests
        if cap is None:
            return None
        return sum(max(0, cap - replica.inflight) for replica in self.fleet.replicas())

    def reject_config(self, source: str, reason: str) -> None:
        """A configuration from ``source`` was invalid: keep the current one, and say so."""
        log.error("keeping the previous router config: %s is invalid: %s", source, reason)
        self.config_error = {"source": source, "reason": reason}
        self.metrics.config_errors.inc()
        self.metrics.config_valid.set(0)

    def apply_config(self, config: RouterConfig) -> bool:
        """Switch to ``config``; rebuild the policy only when a policy knob changed. True if changed."""
        if self.config_error is not None:
            log.info("router configuration is valid again")
            self.config_error = None
            self.metrics.config_valid.set(1)
        if config == self.config:
            return False
        old, self.config = self.config, config
        policy_knobs = {
            "strategy",
            "block_chars",
            "max_blocks",
            "index_capacity_blocks",
            "home_blocks",
            "home_choices",
            "prefill_aware",
            "load_epsilon",
            "load_min_ceiling",
            "balance_epsilon",
            "balance_window",
            "balance_slack",
            "max_concurrent_requests",
            "kv_events",
            "speculative_ttl_seconds",
            "kv_block_size",
        }
        self.engines.configure(config)
        if any(getattr(old, knob) != getattr(config, knob) for knob in policy_knobs):
            self.policy = self._build_policy(config)
            if isinstance(self.policy, strategies.PrefixAwarePolicy):
                # a fresh index only costs a little locality; the engines' caches are still warm
                log.info("prefix index reset by configuration change")
        self._note_kvaware(config)
        self.admission.wake()  # the cap may have grown
        self.metrics.config_reloads.inc()
        log.info(
            "router configuration applied: strategy=%s (served as %s)",
            config.strategy.value,
            config.effective_strategy.value,
        )
        return True

    def set_backends(self, urls: list[str], nodes: Mapping[str, str] | None = None) -> None:
        """Make the fleet exactly ``urls`` (from discovery or flags), with their pods' nodes when known."""
        added, removed = self.fleet.replace(urls, nodes)
        for url in removed:
            self.policy.forget(url)
            self.metrics.forget_replica(url)
        for url in added:
            self.metrics.inflight_of(url).set(0)
        self.metrics.replicas.set(len(self.fleet))
        self.engines.set_replicas(self.fleet.urls())
        self.admission.wake()  # new replicas bring free slots
        if added or removed:
            log.info("replicas changed: +%d -%d, now %d", len(added), len(removed), len(self.fleet))

    def decide(self, parsed: ParsedBody, session: str | None, only: Collection[str] | None = None) -> Routed:
        """Hash the prompt's head and ask the policy for ordered candidates (records metrics).

        ``only`` restricts the candidates to those replica URLs (a gateway's subset hint).
        """
        started = time.perf_counter()
        config = self.config
        key = key_of(
            parsed.head, parsed.chars, block_chars=config.block_chars, max_blocks=config.max_blocks, session=session
        )
        policy = self.policy
        if isinstance(policy, EngineAwarePolicy):
            token_keys = self.engines.token_keys(parsed.request)
            if token_keys is None:
                self.engine_metrics.untokenized.inc()
            key = replace(key, token_blocks=token_keys)
        snapshot = self.fleet.snapshot()
        if self.peer_inflight:
            snapshot = strategies.with_peers(snapshot, self.peer_inflight)
        if only is not None:
            snapshot = strategies.Snapshot(tuple([replica for replica in snapshot.replicas if replica.name in only]))
        try:
            decision = policy.choose(snapshot, key)
        except core.CoreError:
            # the routing core failed (counted in warmstart_router_core_panics_total): this request gets an error
            # from its caller; the slot admission granted it was never taken, so the queue moves on
            self.admission.wake()
            raise
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        if decision.candidates:
            if decision.spilled:
                self.metrics.spill(policy.strategy.value).inc()
            self.metrics.prompt_tokens.inc(key.chars / CHARS_PER_TOKEN)
            if isinstance(policy, EngineAwarePolicy):
                self.engine_metrics.routed.labels("events" if policy.last.by_events else "text").inc()
                self.metrics.matched_tokens.inc(min(policy.last.tokens, key.chars / CHARS_PER_TOKEN))
            else:
                matched_chars = min(decision.matched_blocks * config.block_chars, key.chars)
                self.metrics.matched_tokens.inc(matched_chars / CHARS_PER_TOKEN)
        return Routed(key, decision)

    def placement(self, replica: Replica) -> str:
        """``warm``, ``cold`` or ``unknown``: whether ``replica``'s node is one of the configured warm nodes."""
        warm = self.config.warm_nodes
        if warm is None or replica.node is None:
            return "unknown"
        return "warm" if replica.node in warm else "cold"

    def status(self) -> dict[str, Any]:
        """What ``GET /router/status`` returns: strategy, knobs, replicas and in-flight."""
        fleet = self.fleet.replicas()
        replicas = [{"url": r.url, "inflight": r.inflight, "served": r.served} for r in fleet]
        index_entries = None
        if isinstance(self.policy, strategies.PrefixAwarePolicy):
            index_entries = self.policy.index.total_entries()
        elif isinstance(self.policy, EngineAwarePolicy):
            index_entries = self.policy.text.total_entries()
        return {
            "strategy": self.config.strategy.value,
            "effectiveStrategy": self.config.effective_strategy.value,
            "config": self.config.to_dict(),
            "backends": replicas,
            "inflight": sum(r.inflight for r in fleet),
            "indexEntries": index_entries,
            "queued": self.admission.depth,
            "configError": self.config_error,
            "engines": self.engines.status() if self.config.kv_events else None,
            "peerSync": self.sharing.status() if self.sharing is not None else None,
        }

    @staticmethod
    def _note_kvaware(config: RouterConfig) -> None:
        if config.strategy is RoutingStrategy.KVAWARE:
            log.warning(
                "routing strategy 'kvaware' is not implemented; serving it with 'prefixaware' "
                "(router-side prefix index instead of engine KV events)"
            )
