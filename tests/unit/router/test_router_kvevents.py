"""Decoding vLLM's KV events (every encoding), the event-fed index, and the stream faults.

The follower is driven with real ZMQ sockets: the sim's publisher (vLLM's wire format) and its
replay socket. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import socket

import msgpack
import pytest

from warmstart._routing_core import EventIndex, chain_keys
from warmstart.router import kvevents
from warmstart.router.kvsubscribing import EventPorts, Follower
from warmstart.sim import kvpublishing
from warmstart.sim.engine import token_blocks

TOKENS = list(range(100, 164))  # four blocks of 16


def stored_array(hashes: list[int | bytes], parent: int | bytes | None, tokens: list[int]) -> list[object]:
    return ["BlockStored", hashes, parent, tokens, 16, None, "GPU", None, None, 0, "full", None, "future"]


def test_array_and_map_at_both_levels_decode_alike() -> None:
    array_event = stored_array([1, 2], None, TOKENS[:32])
    map_event = {
        "type": "BlockStored",
        "block_hashes": [1, 2],
        "parent_block_hash": None,
        "token_ids": TOKENS[:32],
        "block_size": 16,
        "medium": "GPU",
        "a_field_from_the_future": {"x": 1},
    }
    expected = kvevents.BlockStored((1, 2), None, tuple(TOKENS[:32]), 16)
    for outer in (
        [1.5, [array_event], None],
        [1.5, [map_event], 0],
        {"ts": 1.5, "events": [map_event], "data_parallel_rank": None, "new": 1},
        {"ts": 1.5, "events": [array_event]},
    ):
        batch = kvevents.decode_batch(msgpack.packb(outer))
        assert batch.events == (expected,) and batch.ts == 1.5


def test_bytes_hashes_unknown_events_and_unkeyable_blocks() -> None:
    digest = bytes(range(32))
    payload = msgpack.packb(
        [
            2.0,
            [
                stored_array([digest], None, TOKENS[:16]),
                ["SomethingNew", 1, 2],
                ["BlockStored", [7], None, TOKENS[:16], 16, 3, "GPU"],  # a LoRA's block
                ["BlockStored", [8], None, TOKENS[:16], 16, None, "CPU"],  # offloaded: not indexed
                ["BlockRemoved", [digest], "GPU"],
                ["AllBlocksCleared"],
            ],
        ],
        use_bin_type=True,
    )
    batch = kvevents.decode_batch(payload)
    assert batch.events == (
        kvevents.BlockStored((digest,), None, tuple(TOKENS[:16]), 16),
        kvevents.Unkeyable((7,)),
        kvevents.BlockRemoved((digest,)),
        kvevents.AllBlocksCleared(),
    )
    assert batch.skipped == 2
    # an engine's garbage is skipped, never applied: token ids that are not 64-bit integers
    for bad in ([1 << 63] * 16, ["a"] * 16, [1.5] * 16, [True] * 16):
        assert kvevents.decode_batch(msgpack.packb([1.0, [stored_array([9], None, bad)]])).events == ()
    with pytest.raises(kvevents.DecodeError):
        kvevents.decode_batch(b"\xc1")
    with pytest.raises(kvevents.DecodeError):
        kvevents.decode_batch(msgpack.packb("text"))


def test_index_keys_by_tokens_not_by_engine_hash() -> None:
    """Two engines hashing the same tokens differently (another PYTHONHASHSEED) index the same keys."""
    index = EventIndex(16)
    keys = chain_keys(TOKENS, 16)
    for replica, salt in (("a", 1), ("b", 99)):
        hashes = [hash((salt, i)) & (2**64 - 1) for i in range(4)]
        index.apply(replica, kvevents.BlockStored(tuple(hashes[:2]), None, tuple(TOKENS[:32]), 16))
        index.apply(replica, kvevents.BlockStored(tuple(hashes[2:]), hashes[1], tuple(TOKENS[32:]), 16))
    assert index.match(keys, ["a", "b"], 0.0) == {"a": 4, "b": 4}
    # removal goes through the engine hash -> key map: a's last two blocks
    index.apply("a", kvevents.BlockRemoved((hash((1, 2)) & (2**64 - 1), hash((1, 3)) & (2**64 - 1))))
    assert index.match(keys, ["a", "b"], 0.0) == {"a": 2, "b": 4}
    # a child whose parent is unknown is not indexed
    index.apply("c", kvevents.BlockStored((5,), 12345, tuple(TOKENS[16:32]), 16))
    assert index.blocks("c") == 0 and index.orphans == 1
    # the engine's block size must be the router's
    index.apply("c", kvevents.BlockStored((6,), None, tuple(TOKENS[:32]), 32))
    assert index.blocks("c") == 0 and index.mismatched == 1
    index.apply("b", kvevents.AllBlocksCleared())
    assert index.match(keys, ["a", "b"], 0.0) == {"a": 2}
    assert index.total_entries() == 2


def test_speculative_entries_expire() -> None:
    index = EventIndex(16)
    keys = chain_keys(TOKENS, 16)
    index.speculate("a", keys[:3], expiry=10.0)
    assert index.match(keys, ["a", "b"], 5.0) == {"a": 3}
    assert index.match(keys, ["a", "b"], 10.0) == {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def batch(events: list[list[object]]) -> bytes:
    return kvpublishing.encode_batch(events, 1.0)


async def started_publisher(buffer_steps: int = 100) -> kvpublishing.Publisher:
    port, replay = free_port(), free_port()
    config = kvpublishing.KVEventsConfig(True, "zmq", f"tcp://*:{port}", f"tcp://*:{replay}", buffer_steps)
    publisher = kvpublishing.Publisher(config)
    publisher.start()
    return publisher


def follower_for(publisher: kvpublishing.Publisher, index: EventIndex) -> tuple[Follower, str]:
    port = int(publisher.endpoint.rsplit(":", 1)[1])
    assert publisher.replay_endpoint is not None
    replay = int(publisher.replay_endpoint.rsplit(":", 1)[1])
    follower = Follower(index, EventPorts(port, replay), replay_timeout=2.0)
    url = "http://127.0.0.1:8000"
    follower.set_replicas([url])
    return follower, url


def engine_events(tokens: list[int]) -> tuple[list[int], list[object]]:
    hashes = token_blocks(tokens, 16)
    return hashes, kvpublishing.stored(hashes, None, tokens, 16)


async def test_gap_is_filled_through_the_replay_socket() -> None:
    publisher = await started_publisher()
    index = EventIndex(16)
    follower, url = follower_for(publisher, index)
    hashes, event = engine_events(TOKENS)
    publisher.publish([event])  # seq 0: published before anything is received (the gap to fill on join)
    publisher.publish([kvpublishing.removed(hashes[3:])])  # seq 1
    # deliver seq 2 directly, as if 0 and 1 had been lost: the follower replays 0..1 first
    await follower.receive(url, [b"", (2).to_bytes(8, "big"), batch([kvpublishing.removed(hashes[2:3])])])
    stream = follower.streams[url]
    assert stream.last_seq == 2 and stream.replays == 1 and stream.drops == 0
    assert index.match(chain_keys(TOKENS, 16), [url], 0.0) == {url: 2}
    # a real gap (3 lost) is replayed too
    publisher.seq = 3
    publisher.publish([kvpublishing.removed(hashes[1:2])])  # seq 3
    await follower.receive(url, [b"", (4).to_bytes(8, "big"), batch([])])
    assert stream.gaps == 1 and stream.replays == 2 and stream.last_seq == 4
    assert index.match(chain_keys(TOKENS, 16), [url], 0.0) == {url: 1}
    await follower.stop()
    await publisher.close()


async def test_restart_unreplayable_gap_and_clear_drop_the_replicas_entries() -> None:
    publisher = await started_publisher(buffer_steps=1)
    index = EventIndex(16)
    follower, url = follower_for(publisher, index)
    _, event = engine_events(TOKENS)
    stream = follower.streams[url]
    await follower.receive(url, [b"", (0).to_bytes(8, "big"), batch([event])])
    assert index.blocks(url) == 4
    # seq goes backwards: the publisher restarted with an empty cache
    await follower.receive(url, [b"", (0).to_bytes(8, "big"), batch([])])
    assert index.blocks(url) == 0 and stream.drop_reasons == {"restart": 1}
    await follower.receive(url, [b"", (1).to_bytes(8, "big"), batch([event])])
    assert index.blocks(url) == 4
    # 2..4 lost and the ring (one batch: the publisher's seq 3) no longer holds 2: unreplayable
    for _ in range(4):
        publisher.publish([["AllBlocksCleared"]])
    await follower.receive(url, [b"", (5).to_bytes(8, "big"), batch([])])
    assert index.blocks(url) == 0 and stream.drop_reasons["unreplayable_gap"] == 1
    await follower.receive(url, [b"", (6).to_bytes(8, "big"), batch([event])])
    await follower.receive(url, [b"", (7).to_bytes(8, "big"), batch([["AllBlocksCleared"]])])
    assert index.blocks(url) == 0 and stream.drop_reasons["cleared"] == 1
    await follower.stop()
    await publisher.close()


async def test_follows_a_live_publisher_and_unsubscribes() -> None:
    publisher = await started_publisher()
    index = EventIndex(16)
    follower, url = follower_for(publisher, index)
    await asyncio.sleep(0.3)  # the subscription reaches the publisher
    _, event = engine_events(TOKENS)
    publisher.publish([event])
    for _ in range(50):
        if follower.live(url):
            break
        await asyncio.sleep(0.05)
    assert follower.live(url) and index.blocks(url) == 4
    follower.set_replicas([])
    assert index.blocks(url) == 0 and not follower.live(url)
    await follower.stop()
    await publisher.close()
