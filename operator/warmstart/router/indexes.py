"""The approximate prefix index: which block hashes each replica probably holds in its KV cache.

The router cannot see the engines' caches, so it remembers what it sent where. Each replica's
entry is an LRU of block hashes bounded by ``capacity_blocks`` (set it to the engine's KV cache
size), so the index forgets roughly when the engine evicts, and memory stays bounded at about
``replicas x capacity_blocks`` entries. A reverse map (block -> replicas) makes a lookup cost
O(matched blocks), not O(replicas x blocks).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class PrefixIndex:
    """Per-replica LRU sets of chained block hashes, with a longest-prefix lookup."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._lru: dict[str, OrderedDict[int, int]] = {}  # block -> sequence number of first insertion
        self._holders: dict[int, set[str]] = {}
        self._sequence = 0

    def match(self, blocks: tuple[int, ...], replicas: Iterable[str]) -> dict[str, int]:
        """Number of leading blocks each replica holds (only replicas with at least one)."""
        matched: dict[str, int] = {}
        if not blocks:
            return matched
        alive = set(replicas)
        for depth, block in enumerate(blocks):
            holders = self._holders.get(block)
            if holders is not None and alive <= holders:
                continue  # every replica still matching holds this block too (the common case)
            survivors = alive & holders if holders else set()
            if depth:
                for replica in alive - survivors:
                    matched[replica] = depth
            alive = survivors
            if not alive:
                return matched
        for replica in alive:
            matched[replica] = len(blocks)
        return matched

    def record(self, replica: str, blocks: tuple[int, ...]) -> None:
        """Remember that ``replica`` now holds ``blocks`` (most recently used), evicting LRU ones."""
        lru = self._lru.setdefault(replica, OrderedDict())
        for block in blocks:
            if block in lru:
                lru.move_to_end(block)
            else:
                self._sequence += 1
                lru[block] = self._sequence
                self._holders.setdefault(block, set()).add(replica)
        while len(lru) > self.capacity_blocks:
            evicted, _ = lru.popitem(last=False)
            self._drop_holder(evicted, replica)

    def holders(self, block: int) -> set[str]:
        """The replicas that hold ``block`` (a copy)."""
        return set(self._holders.get(block, ()))

    def since(self, replica: str, block: int) -> int:
        """When ``replica`` first got ``block`` (a sequence number; smaller = earlier; 0 = never)."""
        lru = self._lru.get(replica)
        return lru.get(block, 0) if lru is not None else 0

    def forget(self, replica: str) -> None:
        """Drop everything known about ``replica`` (it left the fleet)."""
        for block in self._lru.pop(replica, OrderedDict()):
            self._drop_holder(block, replica)

    def replicas(self) -> list[str]:
        """Replicas that have an entry."""
        return sorted(self._lru)

    def blocks(self, replica: str) -> int:
        """How many blocks the index holds for ``replica``."""
        return len(self._lru.get(replica, ()))

    def total_entries(self) -> int:
        """Entries across all replicas: the index's memory is proportional to this."""
        return sum(len(lru) for lru in self._lru.values())

    def _drop_holder(self, block: int, replica: str) -> None:
        holders = self._holders.get(block)
        if holders is None:
            return
        holders.discard(replica)
        if not holders:
            del self._holders[block]
