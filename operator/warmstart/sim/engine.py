"""The simulated engine: a vLLM-like replica's KV prefix cache, scheduler and timing model.

Model (all times are model seconds; ``time_scale`` multiplies every real sleep, so 0.25 runs
four times faster than real time while reporting the same model):

* Tokens are characters / 4. The prompt is cut into 16-token blocks (vLLM's default block
  size) with chained hashes; the KV cache holds ``cache_blocks`` of them with LRU eviction.
  ``cached_tokens`` is the leading run of cached blocks, capped at prompt tokens - 1 (the last
  token is always recomputed, as in vLLM).
* At most ``max_running`` sequences run; more wait in FIFO order (``num_requests_waiting``).
* Prefill is compute bound and shared: the replica prefills one request at a time at
  ``prefill_tokens_per_s`` (uncached tokens only), so TTFT = slot wait + prefill queue wait +
  uncached / prefill rate + ``ttft_overhead_s`` (scheduling and the first decode step).
* Decode runs every running sequence in parallel at ``decode_tokens_per_s`` each.

Defaults describe a Llama-3.1-70B-class replica (8 x H100, TP8, vLLM with prefix caching):
10k prefill tokens/s and a 50 ms first step put a 2,176-token prompt at 63 ms when its
2,048-token prefix is cached and 268 ms when nothing is, which spans the published 63-280 ms.
The default cache (65,536 tokens) is deliberately smaller than such a replica's real KV
memory, so that the scaled-down benchmark workloads exercise eviction the way production
traffic with thousands of prefixes does.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

CHARS_PER_TOKEN = 4
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class EngineParams:
    """The constants of the timing and cache model (documented in docs/router.md)."""

    prefill_tokens_per_s: float = 10_000.0
    decode_tokens_per_s: float = 40.0
    ttft_overhead_s: float = 0.05
    max_running: int = 64
    block_tokens: int = 16
    cache_tokens: int = 65_536
    time_scale: float = 1.0

    @property
    def cache_blocks(self) -> int:
        return max(1, self.cache_tokens // self.block_tokens)

    def scaled(self, factor: int) -> EngineParams:
        """A replica ``factor`` times larger (cache, compute and slots): the ideal bound's engine."""
        return EngineParams(
            prefill_tokens_per_s=self.prefill_tokens_per_s * factor,
            decode_tokens_per_s=self.decode_tokens_per_s,
            ttft_overhead_s=self.ttft_overhead_s,
            max_running=self.max_running * factor,
            block_tokens=self.block_tokens,
            cache_tokens=self.cache_tokens * factor,
            time_scale=self.time_scale,
        )


def count_tokens(text: str) -> int:
    """Simulated tokenizer: 4 characters per token."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


class BlockCache:
    """LRU set of chained block hashes: the replica's KV prefix cache.

    With a :class:`Listener`, every change is reported as vLLM reports it: the blocks newly
    stored (with their parent's hash and token ids) and the blocks evicted.
    """

    def __init__(self, capacity_blocks: int, listener: Listener | None = None) -> None:
        self.capacity_blocks = capacity_blocks
        self.listener = listener
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_fill(self, blocks: list[int], tokens: Sequence[int] = (), block_tokens: int = 0) -> int:
        """Number of leading blocks already cached; then cache all ``blocks`` (most recent last)."""
        hit = 0
        for block in blocks:
            if block not in self._blocks:
                break
            hit += 1
        new: list[int] = []
        for block in blocks:
            if block in self._blocks:
                self._blocks.move_to_end(block)
            else:
                self._blocks[block] = None
                new.append(block)
        evicted: list[int] = []
        while len(self._blocks) > self.capacity_blocks:
            evicted.append(self._blocks.popitem(last=False)[0])
        if self.listener is not None and (new or evicted):
            self.listener.changed(_runs(blocks, set(new), tokens, block_tokens), evicted)
        return hit

    def clear(self) -> None:
        self._blocks.clear()
        if self.listener is not None:
            self.listener.cleared()

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def blocks(self) -> set[int]:
        """The cached block hashes (a copy)."""
        return set(self._blocks)


class Listener(Protocol):
    """Receives the cache's changes (the KV event publisher)."""

    def changed(self, stored: list[StoredRun], evicted: list[int]) -> None: ...

    def cleared(self) -> None: ...


@dataclass(frozen=True)
class StoredRun:
    """Consecutive blocks newly stored: their hashes, the parent's hash (None: the first block), token ids."""

    hashes: list[int]
    parent: int | None
    token_ids: list[int]


def _runs(blocks: list[int], new: set[int], tokens: Sequence[int], block_tokens: int) -> list[StoredRun]:
    runs: list[StoredRun] = []
    for position, block in enumerate(blocks):
        if block not in new:
            continue
        chunk = list(tokens[position * block_tokens : (position + 1) * block_tokens])
        if runs and runs[-1].hashes[-1] == (blocks[position - 1] if position else None):
            runs[-1].hashes.append(block)
            runs[-1].token_ids.extend(chunk)
        else:
            runs.append(StoredRun([block], blocks[position - 1] if position else None, chunk))
    return runs


def sim_token_ids(text: str) -> list[int]:
    """The sim's built-in tokenizer: one token per 4 characters, its id a 24-bit digest of them."""
    ids = []
    for start in range(0, len(text), CHARS_PER_TOKEN):
        chunk = text[start : start + CHARS_PER_TOKEN].encode("utf-8", "surrogatepass")
        ids.append(int.from_bytes(hashlib.blake2b(chunk, digest_size=3).digest(), "big"))
    return ids or [0]


def token_blocks(token_ids: Sequence[int], block_tokens: int) -> list[int]:
    """The engine's chained hashes of the full blocks, as vLLM: ``hash((parent, tokens))``.

    Python's ``hash`` of a tuple depends on ``PYTHONHASHSEED`` (random per process unless set),
    as vLLM's ``NONE_HASH`` does: a router must never rely on these values, only on token ids.
    """
    hashes: list[int] = []
    previous: int | None = None
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        previous = hash((previous, tuple(token_ids[start : start + block_tokens]))) & _U64
        hashes.append(previous)
    return hashes


def prompt_blocks(text: str, block_tokens: int) -> list[int]:
    """Chained hashes of the prompt's full blocks under the built-in tokenizer (offline replays)."""
    return token_blocks(sim_token_ids(text), block_tokens)


@dataclass
class Counters:
    """Cumulative counters, exported with vLLM's metric names."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttfts: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Admitted:
    """A sequence that finished its prefill."""

    prompt_tokens: int
    cached_tokens: int
    ttft_s: float = 0.0
    """Model seconds from arrival to the first token (slot wait + prefill queue + prefill + overhead)."""


class Engine:
    """One replica's scheduler state. Everything runs on the event loop."""

    def __init__(self, params: EngineParams, listener: Listener | None = None) -> None:
        self.params = params
        self.cache = BlockCache(params.cache_blocks, listener)
        self.counters = Counters()
        self.running = 0
        self.waiting = 0
        self._slots = asyncio.Semaphore(params.max_running)
        self._prefill_free_at = 0.0

    def reset(self) -> None:
        """Drop the prefix cache (vLLM's ``/reset_prefix_cache``); counters keep counting."""
        self.cache.clear()

    async def sleep(self, model_seconds: float) -> None:
        """Sleep ``model_seconds`` of model time."""
        if model_seconds > 0:
            await asyncio.sleep(model_seconds * self.params.time_scale)

    @asynccontextmanager
    async def sequence(self, prompt: str, token_ids: Sequence[int] | None = None) -> AsyncIterator[Admitted]:
        """Hold a running slot: wait for one, prefill, yield; the slot is freed on exit."""
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            admitted = self._lookup(prompt if token_ids is None else token_ids)
            work = (admitted.prompt_tokens - admitted.cached_tokens) / self.params.prefill_tokens_per_s
            scale = self.params.time_scale
            now = loop.time()
            start = max(now, self._prefill_free_at)
            self._prefill_free_at = start + work * scale
            await asyncio.sleep(self._prefill_free_at - now + self.params.ttft_overhead_s * scale)
            # the model's TTFT, computed rather than timed, so event-loop lag on a busy machine
            # is not magnified by 1/scale (the waits before admission are real and are scaled)
            waited = (start - arrived) / scale if scale else 0.0
            ttft = waited + work + self.params.ttft_overhead_s
            self.counters.ttfts.append(ttft)
            if len(self.counters.ttfts) > 100_000:
                del self.counters.ttfts[:50_000]
            yield Admitted(admitted.prompt_tokens, admitted.cached_tokens, ttft)
        finally:
            self.running -= 1
            self._slots.release()

    def _lookup(self, prompt: str | Sequence[int]) -> Admitted:
        token_ids = sim_token_ids(prompt) if isinstance(prompt, str) else prompt
        tokens = max(1, len(token_ids))
        block_tokens = self.params.block_tokens
        blocks = token_blocks(token_ids, block_tokens)
        hit_blocks = self.cache.lookup_and_fill(blocks, token_ids, block_tokens)
        cached = min(hit_blocks * block_tokens, tokens - 1)
        self.counters.requests += 1
        self.counters.prompt_tokens += tokens
        self.counters.prefix_queries += tokens
        self.counters.prefix_hits += cached
        return Admitted(tokens, cached)
