"""Simulated engine: LRU block cache, cached-token accounting, slots and queueing."""

from __future__ import annotations

import asyncio

from warmstart.sim.engine import BlockCache, Engine, EngineParams, count_tokens, prompt_blocks


def test_block_cache_reports_leading_hits_and_evicts_lru() -> None:
    cache = BlockCache(capacity_blocks=4)
    assert cache.lookup_and_fill([1, 2, 3]) == 0
    assert cache.lookup_and_fill([1, 2, 9]) == 2
    assert len(cache) == 4
    cache.lookup_and_fill([5])  # evicts 3, the least recently used
    assert cache.lookup_and_fill([1, 2, 3]) == 2


def test_prompt_blocks_are_chained_and_full_only() -> None:
    text = "a" * 64 * 3 + "b" * 10
    blocks = prompt_blocks(text, 16)
    assert len(blocks) == 3
    assert len(set(blocks)) == 3
    assert prompt_blocks("c" * 64 + "a" * 64, 16)[1] != prompt_blocks("d" * 64 + "a" * 64, 16)[1]


def test_token_count_is_four_chars_per_token() -> None:
    assert count_tokens("x" * 400) == 100
    assert count_tokens("") == 1


async def test_second_request_with_same_prefix_is_cached_but_never_the_last_token() -> None:
    engine = Engine(EngineParams(time_scale=0.0))
    prompt = "p" * 64 * 10
    async with engine.sequence(prompt) as first:
        pass
    async with engine.sequence(prompt) as second:
        pass
    assert first.cached_tokens == 0
    assert second.cached_tokens == second.prompt_tokens - 1
    assert engine.counters.prefix_hits == second.cached_tokens
    assert engine.counters.prefix_queries == 2 * first.prompt_tokens


async def test_beyond_max_running_requests_wait() -> None:
    engine = Engine(EngineParams(max_running=2, time_scale=0.0))
    release = asyncio.Event()
    started = 0

    async def hold() -> None:
        nonlocal started
        async with engine.sequence("x" * 100):
            started += 1
            await release.wait()

    tasks = [asyncio.create_task(hold()) for _ in range(5)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert (engine.running, engine.waiting, started) == (2, 3, 2)
    release.set()
    await asyncio.gather(*tasks)
    assert (engine.running, engine.waiting, started) == (0, 0, 5)


async def test_cancelled_waiter_leaves_counts_exact() -> None:
    engine = Engine(EngineParams(max_running=1, time_scale=0.0))
    gate = asyncio.Event()

    async def hold() -> None:
        async with engine.sequence("y"):
            await gate.wait()

    holder = asyncio.create_task(hold())
    waiter = asyncio.create_task(hold())
    for _ in range(10):
        await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert engine.waiting == 0
    gate.set()
    await holder
    assert engine.running == 0


def test_scaled_params_multiply_capacity_not_latency() -> None:
    big = EngineParams().scaled(8)
    assert big.cache_tokens == 8 * EngineParams().cache_tokens
    assert big.prefill_tokens_per_s == 8 * EngineParams().prefill_tokens_per_s
    assert big.ttft_overhead_s == EngineParams().ttft_overhead_s
