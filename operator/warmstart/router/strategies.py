"""Routing policies: (a snapshot of replicas and their in-flight load, a prompt key) -> ordered candidates.

Every policy is pure apart from its own small memory (a round-robin cursor, the prefix index),
does no I/O, and is unit-tested on hand-made snapshots. The proxy tries the candidates in order:
the first is the choice, the next ones are used only when a replica refuses the connection.
The prefix-aware rules below run in the routing core (``routing-core/src/picking.rs``, compiled);
this module holds the simple policies and adapts snapshots and keys to the core.

``prefixaware`` (the interesting one):

1. Count, per replica, the leading blocks of the prompt it probably holds (:class:`PrefixIndex`).
2. Rank replicas by the longest match; among replicas holding the same longest match, the one
   with the smallest recent request share wins, then the one that has held it longest (existing
   prefixes stay on their warm replicas when one is added). No match at all is ranked by
   rendezvous (highest-random-weight) hashing of the prompt's leading ``home_blocks`` blocks,
   a function of the prefix and the replica set only, so every router replica agrees on it,
   and adding or removing a replica moves only about 1/N of them.
3. With ``prefill_aware`` (off by default), among eligible replicas that hold the longest
   match the one with the shortest estimated prefill backlog wins (uncached prompt characters
   sent to it and not yet answered), and a prompt cached nowhere whose home has a backlog goes
   to its second candidate when that one has none (no cold prefill queued behind another).
4. A replica is eligible while (a) its in-flight count is below the concurrency cap and the
   burst ceiling ``max(min_ceiling, ceil((1+eps) x (total in-flight + 1) / N))``, and (b) its
   share of this router's recent requests (:class:`ShareMeter`, decayed per request) is below
   ``(1+balance_eps) x (recent + 1) / N`` plus ``balance_slack`` requests if it holds part of
   the prompt, one request fewer if it does not (placing a prefix on a replica is held to a
   slightly tighter bound than keeping one where it is cached). (b) is the balance at every load
   level: an in-flight ceiling cannot bound request shares at low load, where every replica
   has 0-2 requests in flight (the former floor of 8 let one replica take most requests).
   The first eligible replica in the ranking wins; passing over the best one is a *spill*,
   and spills follow the prefix's rendezvous order, so a hot prefix spreads over as few
   replicas as its load needs (controlled replication) instead of swamping one.

Conversations (chat requests with a first user message, ``PromptKey.anchor``): a conversation is
identified by its anchor, the leading messages through the first user message, which every later
turn repeats. Ranking by the longest known prefix would not keep a conversation together across
router replicas: a router that did not route the previous turns knows only the shared system
prompt, cached on several replicas, and would pick one by its own shares. So a chat request is
placed by the anchor instead:

5. Replicas this router already sent the conversation to come first (deepest history first);
   the others follow in the rendezvous order of the anchor's hash. A router that has not seen
   the conversation sends it to the anchor's first candidate, which is where every router
   placed its first turn unless that replica was over the share bound then.
6. A continuing conversation stays where it is: only the burst ceiling and the cap move it
   (moving a conversation costs a prefill of its whole history). A new conversation (first turn)
   is placed under the share bound without slack, so balance comes from where conversations
   start, not from moving them. A repeated first turn (the same anchor again, nothing after it),
   or a later turn whose anchor several replicas hold and none holds its history (an opening many
   conversations share), is a hot prefix: its holders are held to the usual bound with slack.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from warmstart import _routing_core as core
from warmstart.api.routers import RouterConfig
from warmstart.api.strategies import RoutingStrategy
from warmstart.router.prefixes import PromptKey


class ReplicaLoad(NamedTuple):
    """One replica as the policy sees it (a named tuple: one is built per replica per request)."""

    name: str
    inflight: int
    prefill_chars: int = 0
    """Prompt characters sent to this replica whose first response byte has not arrived yet and
    that the router expected to be uncached: the replica's estimated prefill backlog."""
    peers: int = 0
    """Requests the router's peers (other router replicas) have in flight here: load, not this router's cap."""

    @property
    def load(self) -> int:
        """In flight here from every router replica this router hears from."""
        return self.inflight + self.peers


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The fleet at decision time."""

    replicas: tuple[ReplicaLoad, ...]

    @property
    def total_inflight(self) -> int:
        """In flight over the fleet, the peers' requests included."""
        return sum(replica.inflight + replica.peers for replica in self.replicas)


def with_peers(snapshot: Snapshot, peers: Mapping[str, int]) -> Snapshot:
    """``snapshot`` with the peers' in-flight counts of each replica."""
    return Snapshot(tuple([replica._replace(peers=peers.get(replica.name, 0)) for replica in snapshot.replicas]))


@dataclass(frozen=True, slots=True)
class Decision:
    """Ordered candidates (first = choice) and what the policy knew when it chose."""

    candidates: tuple[str, ...]
    matched_blocks: int = 0
    spilled: bool = False


class Policy(Protocol):
    """What every strategy implements."""

    strategy: RoutingStrategy

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        """Order the replicas for this request; empty snapshot -> no candidates."""
        ...

    def placed(self, replica: str, key: PromptKey) -> None:
        """The request was sent to ``replica`` (prefix-aware remembers the blocks)."""
        ...

    def forget(self, replica: str) -> None:
        """``replica`` left the fleet."""
        ...


def _under_cap(replica: ReplicaLoad, cap: int | None) -> bool:
    return cap is None or replica.inflight < cap


def _cap_first(ordered: list[ReplicaLoad], cap: int | None) -> tuple[str, ...]:
    """Keep the order, but put replicas at the concurrency cap last (least loaded first)."""
    under = [replica.name for replica in ordered if _under_cap(replica, cap)]
    over = sorted((replica for replica in ordered if not _under_cap(replica, cap)), key=lambda r: r.inflight)
    return tuple(under) + tuple(replica.name for replica in over)


class _Stateless:
    """Shared no-op bookkeeping for policies without memory of placements."""

    def placed(self, replica: str, key: PromptKey) -> None:
        return None

    def forget(self, replica: str) -> None:
        return None


class RandomPolicy(_Stateless):
    """Uniformly random replica (the default)."""

    strategy = RoutingStrategy.RANDOM

    def __init__(self, cap: int | None, rng: random.Random) -> None:
        self.cap, self.rng = cap, rng

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        ordered = list(snapshot.replicas)
        self.rng.shuffle(ordered)
        return Decision(_cap_first(ordered, self.cap))


class RoundRobinPolicy(_Stateless):
    """Each replica in turn (by name order)."""

    strategy = RoutingStrategy.ROUNDROBIN

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self._cursor = 0

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        ordered = sorted(snapshot.replicas, key=lambda r: r.name)
        if not ordered:
            return Decision(())
        start = self._cursor % len(ordered)
        self._cursor += 1
        return Decision(_cap_first(ordered[start:] + ordered[:start], self.cap))


class LeastOutstandingPolicy(_Stateless):
    """Fewest in-flight requests; ties broken at random."""

    strategy = RoutingStrategy.LEASTOUTSTANDING

    def __init__(self, cap: int | None, rng: random.Random) -> None:
        self.cap, self.rng = cap, rng

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        ordered = sorted(snapshot.replicas, key=lambda r: (r.load, self.rng.random()))
        return Decision(_cap_first(ordered, self.cap))


def rendezvous_order(seed: str | int, names: list[str]) -> list[str]:
    """Replicas by descending highest-random-weight score for ``seed`` (stable across processes)."""
    return core.rendezvous_order(seed, names)


class SessionPolicy(_Stateless):
    """Consistent (rendezvous) hash of the session key; no key -> least outstanding."""

    strategy = RoutingStrategy.SESSION

    def __init__(self, cap: int | None, rng: random.Random) -> None:
        self.cap = cap
        self._fallback = LeastOutstandingPolicy(cap, rng)

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        if key.session is None:
            return self._fallback.choose(snapshot, key)
        by_name = {replica.name: replica for replica in snapshot.replicas}
        order = rendezvous_order(key.session, list(by_name))
        return Decision(_cap_first([by_name[name] for name in order], self.cap))


def load_ceiling(snapshot: Snapshot, epsilon: float, min_ceiling: int) -> int:
    """Bounded-load ceiling: max(min_ceiling, ceil((1+eps) x (in-flight + 1) / replicas))."""
    return core.load_ceiling(snapshot.total_inflight, len(snapshot.replicas), epsilon, min_ceiling)


def share_bound(recent_total: float, replicas: int, epsilon: float, slack: float) -> float:
    """Request-share ceiling: (1+eps) x (recent requests + 1) / replicas + slack."""
    return core.share_bound(recent_total, replicas, epsilon, slack)


class PrefixAwarePolicy:
    """Longest cached prefix, bounded load, rendezvous homes and spill order (see module doc); the
    routing core's :class:`~warmstart._routing_core.PrefixPicker` decides."""

    strategy = RoutingStrategy.PREFIXAWARE

    def __init__(self, config: RouterConfig, rng: random.Random) -> None:
        self.cap = config.max_concurrent_requests
        self.index = core.PrefixIndex(config.index_capacity_blocks)
        self.shares = core.ShareMeter(config.balance_window)
        self.picker = core.PrefixPicker(
            cap=self.cap,
            epsilon=config.load_epsilon,
            min_ceiling=config.load_min_ceiling,
            block_chars=config.block_chars,
            home_blocks=config.home_blocks,
            home_choices=config.home_choices,
            prefill_aware=config.prefill_aware,
            balance_epsilon=config.balance_epsilon,
            balance_slack=config.balance_slack,
            index=self.index,
            shares=self.shares,
        )
        self._short = LeastOutstandingPolicy(self.cap, rng)

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        replicas = snapshot.replicas
        picked = self.picker.choose(
            [r.name for r in replicas],
            [r.inflight for r in replicas],
            [r.peers for r in replicas],
            [r.prefill_chars for r in replicas],
            key.blocks,
            key.anchor,
            key.anchor_chars,
            key.chars,
        )
        if picked is None:  # shorter than one block: nothing to reuse, balance load instead
            return self._short.choose(snapshot, key)
        candidates, matched, spilled = picked
        if not candidates:
            return Decision(())
        return Decision(tuple(candidates), matched_blocks=matched, spilled=spilled)

    def placed(self, replica: str, key: PromptKey) -> None:
        self.picker.placed(replica, key.blocks, key.anchor)

    def forget(self, replica: str) -> None:
        self.picker.forget(replica)


def build(config: RouterConfig, rng: random.Random | None = None) -> Policy:
    """The policy for ``config.strategy`` (``kvaware`` is served by ``prefixaware``)."""
    rng = rng or random.Random()
    cap = config.max_concurrent_requests
    strategy = config.effective_strategy
    if strategy is RoutingStrategy.ROUNDROBIN:
        return RoundRobinPolicy(cap)
    if strategy is RoutingStrategy.LEASTOUTSTANDING:
        return LeastOutstandingPolicy(cap, rng)
    if strategy is RoutingStrategy.SESSION:
        return SessionPolicy(cap, rng)
    if strategy is RoutingStrategy.PREFIXAWARE:
        return PrefixAwarePolicy(config, rng)
    return RandomPolicy(cap, rng)
