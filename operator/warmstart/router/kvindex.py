"""The event-fed prefix index: which token blocks each engine reports it holds, keyed by the router's own hash.

Keys are the router's chain hash over token ids (:func:`chain_keys`): block i's key is the 8-byte
BLAKE2b digest of block i-1's key and block i's token ids, so it is the same in every router
process and never depends on how the engine hashes (``PYTHONHASHSEED``, the hash algorithm).
``BlockStored`` carries the token ids; the index computes their keys from the parent's key and
remembers ``engine hash -> key`` so that ``BlockRemoved`` applies. A child whose parent the index
does not know (it missed the parent's event, or the parent cannot be keyed) is not indexed.

Beside the engines' truth, a router's own recent placements enter the index for a short TTL
(speculative entries), covering the time before the engine's events confirm them.
"""

from __future__ import annotations

import hashlib
import heapq
from array import array
from collections.abc import Iterable, Sequence

from warmstart.router import kvevents
from warmstart.router.kvevents import EngineHash

_BLAKE2B_8 = hashlib.blake2b(digest_size=8)
#: The parent of a prompt's first block.
ROOT = b"\x00" * 8


def _key(parent: bytes, tokens: Sequence[int]) -> bytes:
    state = _BLAKE2B_8.copy()
    state.update(parent)
    state.update(array("q", tokens).tobytes())
    return state.digest()


def chain_keys(tokens: Sequence[int], block_size: int, parent: bytes = ROOT) -> tuple[int, ...]:
    """The router's keys of the full ``block_size`` blocks of ``tokens``, chained from ``parent``."""
    data = memoryview(array("q", tokens).tobytes())
    step = block_size * 8
    keys: list[int] = []
    for start in range(0, (len(tokens) // block_size) * step, step):
        state = _BLAKE2B_8.copy()
        state.update(parent)
        state.update(data[start : start + step])
        parent = state.digest()
        keys.append(int.from_bytes(parent, "big"))
    return tuple(keys)


class EventIndex:
    """Per-replica sets of block keys built from KV events, with a longest-prefix lookup."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._keys: dict[str, dict[int, int]] = {}  # replica -> key -> engine blocks holding it
        self._engine: dict[str, dict[EngineHash, int | None]] = {}  # replica -> engine hash -> key (None: unkeyable)
        self._holders: dict[int, set[str]] = {}
        self._speculative: dict[int, dict[str, float]] = {}  # key -> replica -> expiry
        self._expiries: list[tuple[float, int, str]] = []
        self.orphans = 0
        """Blocks not indexed because their parent was unknown."""
        self.mismatched = 0
        """Blocks not indexed because the engine's block size differs from the router's."""

    def apply(self, replica: str, event: kvevents.Event) -> None:
        """Apply one decoded event from ``replica``."""
        if isinstance(event, kvevents.BlockStored):
            self._stored(replica, event)
        elif isinstance(event, kvevents.Unkeyable):
            engine = self._engine.setdefault(replica, {})
            for engine_hash in event.block_hashes:
                engine.setdefault(engine_hash, None)
        elif isinstance(event, kvevents.BlockRemoved):
            self._removed(replica, event.block_hashes)
        elif isinstance(event, kvevents.AllBlocksCleared):
            self.clear(replica)

    def _stored(self, replica: str, event: kvevents.BlockStored) -> None:
        engine = self._engine.setdefault(replica, {})
        if event.block_size != self.block_size:
            self.mismatched += len(event.block_hashes)
            for engine_hash in event.block_hashes:
                engine.setdefault(engine_hash, None)
            return
        if event.parent_block_hash is None:
            parent: bytes | None = ROOT
        else:
            parent_key = engine.get(event.parent_block_hash)
            parent = None if parent_key is None else parent_key.to_bytes(8, "big")
        keys = self._keys.setdefault(replica, {})
        size = self.block_size
        for position, engine_hash in enumerate(event.block_hashes):
            if parent is None:
                self.orphans += 1
                engine.setdefault(engine_hash, None)
                continue
            parent = _key(parent, event.token_ids[position * size : (position + 1) * size])
            key = int.from_bytes(parent, "big")
            if engine.get(engine_hash) == key:
                continue  # stored again (a duplicate event): nothing changes
            if engine_hash in engine:
                self._drop(replica, engine.pop(engine_hash))
            engine[engine_hash] = key
            count = keys.get(key, 0)
            keys[key] = count + 1
            if not count:
                self._holders.setdefault(key, set()).add(replica)

    def _removed(self, replica: str, hashes: Iterable[EngineHash]) -> None:
        engine = self._engine.get(replica)
        if engine is None:
            return
        for engine_hash in hashes:
            if engine_hash in engine:
                self._drop(replica, engine.pop(engine_hash))

    def _drop(self, replica: str, key: int | None) -> None:
        if key is None:
            return
        keys = self._keys.get(replica)
        if keys is None or key not in keys:
            return
        keys[key] -= 1
        if keys[key] <= 0:
            del keys[key]
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(replica)
                if not holders:
                    del self._holders[key]

    def clear(self, replica: str) -> None:
        """Forget everything ``replica`` reported (a restart, an unreplayable gap, a cleared cache, gone)."""
        for key in self._keys.pop(replica, {}):
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(replica)
                if not holders:
                    del self._holders[key]
        self._engine.pop(replica, None)

    def speculate(self, replica: str, keys: Iterable[int], expiry: float) -> None:
        """The router sent these blocks to ``replica``: count them as held until ``expiry``."""
        for key in keys:
            self._speculative.setdefault(key, {})[replica] = expiry
            heapq.heappush(self._expiries, (expiry, key, replica))

    def expire(self, now: float) -> None:
        """Drop speculative entries whose TTL has passed."""
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, key, replica = heapq.heappop(expiries)
            entry = self._speculative.get(key)
            if entry is not None and entry.get(replica, now + 1) <= now:
                del entry[replica]
                if not entry:
                    del self._speculative[key]

    def match(self, keys: Sequence[int], replicas: Iterable[str], now: float) -> dict[str, int]:
        """Leading blocks of ``keys`` each replica holds, by events or by an unexpired own pick."""
        self.expire(now)
        matched: dict[str, int] = {}
        alive = set(replicas)
        for depth, key in enumerate(keys):
            holders = self._holders.get(key, set())
            speculative = self._speculative.get(key)
            if speculative:
                holders = holders | speculative.keys()
            survivors = alive & holders
            if depth:
                for replica in alive - survivors:
                    matched[replica] = depth
            alive = survivors
            if not alive:
                return matched
        for replica in alive:
            matched[replica] = len(keys)
        return matched

    def engine_hashes(self, replica: str) -> set[EngineHash]:
        """The engine hashes of ``replica``'s indexed blocks (for checks against the engine's cache)."""
        return {h for h, key in self._engine.get(replica, {}).items() if key is not None}

    def keys(self, replica: str) -> set[int]:
        """The router keys ``replica`` reported holding."""
        return set(self._keys.get(replica, ()))

    def blocks(self, replica: str) -> int:
        """Distinct keys ``replica`` reported holding."""
        return len(self._keys.get(replica, ()))

    def holds(self, replica: str, key: int) -> bool:
        """Whether ``replica`` reported holding ``key`` (events only)."""
        return key in self._keys.get(replica, ())

    def total_entries(self) -> int:
        return sum(len(keys) for keys in self._keys.values())
