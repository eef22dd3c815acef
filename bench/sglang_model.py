"""A model of SGLang's ``cache_aware`` policy for the offline replay: a reference, not the real router.

SGLang's router (``bench/routing.py`` runs the real one) keeps one approximate radix tree of the
text it sent to each worker. Per request: if the loads it counts itself are imbalanced
(``max - min > balance_abs`` and ``max > min x balance_rel``) the least loaded worker wins;
otherwise the worker with the longest matched prefix wins when the match covers more than
``cache_threshold`` of the text, else the worker whose tree is smallest. Here the tree is
modelled by the same chained block hashes the warmstart policy uses (unbounded, as SGLang's
default 64 Mi-character tree is for these workloads), and tree size by blocks recorded.
"""

from __future__ import annotations

from warmstart._routing_core import PrefixIndex
from warmstart.api.strategies import RoutingStrategy
from warmstart.router.prefixes import PromptKey
from warmstart.router.strategies import Decision, Snapshot

#: The launcher's defaults, and the tight guard bench/routing.py also runs.
DEFAULT = {"cache_threshold": 0.3, "balance_abs": 64, "balance_rel": 1.5}
GUARD = {"cache_threshold": 0.3, "balance_abs": 2, "balance_rel": 1.2}


class SGLangCacheAware:
    """SGLang ``cache_aware`` reduced to block hashes (see module doc)."""

    strategy = RoutingStrategy.PREFIXAWARE

    def __init__(self, cache_threshold: float, balance_abs: int, balance_rel: float) -> None:
        self.cache_threshold, self.balance_abs, self.balance_rel = cache_threshold, balance_abs, balance_rel
        self.index = PrefixIndex(1 << 30)

    def choose(self, snapshot: Snapshot, key: PromptKey) -> Decision:
        loads = {replica.name: replica.inflight for replica in snapshot.replicas}
        if not loads:
            return Decision(())
        names = sorted(loads)
        high, low = max(loads.values()), min(loads.values())
        if high - low > self.balance_abs and high > low * self.balance_rel:
            return Decision((min(names, key=lambda n: loads[n]),))
        matched = self.index.match(key.blocks, names)
        best = max(names, key=lambda n: (matched.get(n, 0), -self.index.since(n, key.blocks[0]) if key.blocks else 0))
        rate = matched.get(best, 0) / max(1, len(key.blocks))
        if rate > self.cache_threshold:
            return Decision((best,), matched_blocks=matched.get(best, 0))
        return Decision((min(names, key=lambda n: (self.index.blocks(n), loads[n])),))

    def placed(self, replica: str, key: PromptKey) -> None:
        self.index.record(replica, key.blocks)

    def forget(self, replica: str) -> None:
        self.index.forget(replica)
