"""A failure inside the compiled routing core costs one request an error, never the process, and is counted.

The panic is a real one, raised inside the core by ``check_panic_guard`` in place of the pick; the
proxy and the picker are the real servers. Malformed KV events and oversized inputs reach the real
decoder and indexes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import aiohttp
import grpc
import msgpack
import pytest

from eppharness import Stream, completion, pick_of, request_body, request_headers
from proxyharness import RouterFactory, SimFactory
from warmstart import _routing_core as core
from warmstart.api.routers import RouterConfig
from warmstart.router import extproc, kvevents
from warmstart.router.routing import Router
from warmstart.router.strategies import PrefixAwarePolicy


class PanickingPicker:
    """Stands in for the policy's core picker: every pick panics inside the core."""

    def choose(self, *args: object) -> None:
        core.check_panic_guard("injected by the test")


def _panics_metric(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("warmstart_router_core_panics_total "):
            return float(line.split()[1])
    raise AssertionError("warmstart_router_core_panics_total is not exported")


async def test_a_core_panic_is_a_500_for_that_request_and_counted(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    running = await routers(RouterConfig(strategy="prefixaware"), [replica.url])
    policy = running.router.policy
    assert isinstance(policy, PrefixAwarePolicy)
    before = core.panics()
    working, policy.picker = policy.picker, PanickingPicker()  # type: ignore[assignment]
    body = {"model": "m", "prompt": "a prompt longer than one block " * 20, "max_tokens": 2}
    async with client.post(running.url + "/v1/completions", json=body) as response:
        assert response.status == 500
        assert (await response.json())["error"]["message"]
    assert core.panics() == before + 1
    async with client.get(running.admin_url + "/metrics") as response:
        assert _panics_metric(await response.text()) == before + 1
    assert replica.replica.engine.counters.requests == 0
    assert running.router.status()["inflight"] == 0
    policy.picker = working
    async with client.post(running.url + "/v1/completions", json=body) as response:
        assert response.status == 200  # the same process serves the next request
    assert running.router.status()["inflight"] == 0


async def test_a_core_panic_in_the_picker_fails_that_stream_only() -> None:
    fleet = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    router = Router(RouterConfig(strategy="prefixaware"), fleet)
    server = await extproc.serve(router, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        policy = router.policy
        assert isinstance(policy, PrefixAwarePolicy)
        before = core.panics()
        working, policy.picker = policy.picker, PanickingPicker()  # type: ignore[assignment]
        stream = Stream(channel)
        await stream.send(request_headers(), request_body(completion("a shared system prompt. " * 40)))
        with pytest.raises(grpc.aio.AioRpcError):  # the gateway applies its failure mode (a 500 by default)
            await stream.read()
        assert core.panics() == before + 1
        assert router.status()["inflight"] == 0
        policy.picker = working
        stream = Stream(channel)
        await stream.send(request_headers(), request_body(completion("a shared system prompt. " * 40)))
        header, _ = pick_of(await stream.read())
        assert header.split(",")[0] in {url.removeprefix("http://") for url in fleet}
        stream.cancel()
    finally:
        await channel.close()
        await server.stop(0)


def _payloads(seed: int, count: int) -> list[bytes]:
    """Malformed payloads: random bytes, truncated and bit-flipped batches, wrong shapes, deep nesting."""
    rng = random.Random(seed)
    tokens = list(range(32))
    good = msgpack.packb([1.0, [["BlockStored", [1, 2], None, tokens, 16], ["BlockRemoved", [1]]]])
    shapes: list[bytes] = [
        b"",
        b"\xc1",
        b"\x91" * 100_000 + b"\x90",  # nesting far deeper than any batch
        b"\xdd\xff\xff\xff\xff",  # an array that claims 4 billion items
        msgpack.packb({"ts": "yesterday", "events": "none"}),
        msgpack.packb([0, [["BlockStored", [1], None, [1.5] * 16, 16]]]),
        msgpack.packb([0, [["BlockStored", [1], None, list(range(16)), 0]]]),
        msgpack.packb([0, [["BlockStored", [1], None, [2**63] * 16, 16]]]),
        msgpack.packb([0, [["BlockStored", ["text hash"], None, list(range(16)), 16]]]),
    ]
    for _ in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            shapes.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
        elif kind == 1:
            shapes.append(good[: rng.randrange(len(good))])
        else:
            flipped = bytearray(good)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            shapes.append(bytes(flipped))
    return shapes


def _apply_all(payloads: Sequence[bytes]) -> tuple[int, int]:
    index = core.EventIndex(16)
    decoded = refused = 0
    for payload in payloads:
        try:
            batch = kvevents.decode_batch(payload)
        except kvevents.DecodeError:
            refused += 1
            continue
        index.apply_batch("r", batch)
        decoded += 1
    return decoded, refused


def test_malformed_kv_events_are_refused_or_skipped_never_a_crash() -> None:
    before = core.panics()
    decoded, refused = _apply_all(_payloads(seed=7, count=3000))
    assert refused > 0 and decoded > 0
    assert core.panics() == before, "no malformed payload reaches a panic"


def test_an_oversized_batch_and_prompt_are_handled_within_bounds() -> None:
    tokens = list(range(16)) * 65_536  # 1 Mi token ids in one event
    hashes = list(range(len(tokens) // 16))
    batch = kvevents.decode_batch(msgpack.packb([0.0, [["BlockStored", hashes, None, tokens, 16]]]))
    index = core.EventIndex(16)
    index.apply_batch("r", batch)
    assert index.blocks("r") == len(hashes)
    # a prompt of a million characters costs only the hashed head
    assert len(core.block_hashes("x" * 1_000_000, 64, 32)) == 32
