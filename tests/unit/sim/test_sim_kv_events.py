"""The sim publishes vLLM's KV-event stream, and only what its cache really stores and evicts.

Real ZMQ sockets on loopback and a real (tiny) Hugging Face tokenizer; nothing is faked.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from warmstart.router.tokenizing import ModelTokenizer
from warmstart.sim import tinytokenizer
from warmstart.sim.engine import EngineParams
from warmstart.sim.kvpublishing import KVEventsConfig, Publisher
from warmstart.sim.server import SimReplica
from warmstart.sim.workloads import words


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tokenizer(tmp_path: Path) -> ModelTokenizer:
    return ModelTokenizer.from_dir(tinytokenizer.build(tmp_path / "tok"))


def test_config_is_vllms_json() -> None:
    config = KVEventsConfig.from_json(
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:6000",'
        ' "replay_endpoint": "tcp://*:6001", "buffer_steps": 5, "topic": "kv", "max_queue_size": 10}'
    )
    assert config.publishing and config.endpoint == "tcp://*:6000" and config.buffer_steps == 5
    assert not KVEventsConfig.from_json('{"enable_kv_cache_events": false}').publishing
    with pytest.raises(ValueError, match="publisher"):
        KVEventsConfig.from_json('{"enable_kv_cache_events": true, "publisher": "kafka"}')


async def receive_all(sub: zmq.asyncio.Socket, idle: float = 0.3) -> list[list[bytes]]:
    messages = []
    while True:
        try:
            messages.append(await asyncio.wait_for(sub.recv_multipart(), idle))
        except TimeoutError:
            return messages


async def test_event_stream_equals_the_cache(tokenizer: ModelTokenizer) -> None:
    port, replay_port = free_port(), free_port()
    config = KVEventsConfig(True, "zmq", f"tcp://*:{port}", f"tcp://*:{replay_port}", topic="kv@sim")
    publisher = Publisher(config)
    publisher.start()
    # a cache of 12 blocks: the prompts below overflow it, so the stream must carry evictions
    params = EngineParams(time_scale=0.0, cache_tokens=12 * 16, decode_tokens_per_s=1e9)
    replica = SimReplica("r0", params, tokenizer=tokenizer, publisher=publisher)
    context = zmq.asyncio.Context.instance()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    await asyncio.sleep(0.3)  # ZMQ's slow joiner: let the subscription reach the publisher
    import random

    rng = random.Random(7)
    shared = words(rng, 80)
    bodies: list[dict[str, Any]] = []
    for i in range(6):
        bodies.append({"prompt": shared + words(rng, 40 + i), "max_tokens": 1})
        bodies.append(
            {"messages": [{"role": "system", "content": shared}, {"role": "user", "content": words(rng, 30)}]}
        )
    async with TestClient(TestServer(replica.app)) as client:
        for body in bodies:
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            response = await client.post(path, json=body)
            assert response.status == 200
    messages = await receive_all(sub)
    assert messages, "no KV events were published"
    held: dict[int, list[int]] = {}
    seqs = []
    removed = 0
    for topic, seq, payload in messages:
        assert topic == b"kv@sim"
        seqs.append(int.from_bytes(seq, "big"))
        ts, events, rank = msgpack.unpackb(payload)  # vLLM's array encoding of EventBatch
        assert isinstance(ts, float) and rank is None
        for event in events:
            if event[0] == "BlockStored":
                hashes, parent, token_ids, block_size = event[1], event[2], event[3], event[4]
                assert block_size == 16 and len(token_ids) == 16 * len(hashes)
                assert parent is None or parent in held, "a stored block's parent is not cached"
                for i, h in enumerate(hashes):
                    held[h] = token_ids[16 * i : 16 * (i + 1)]
            elif event[0] == "BlockRemoved":
                for h in event[1]:
                    assert h in held, "an evicted block was never stored"
                    del held[h]
                    removed += 1
    assert seqs == list(range(len(seqs)))
    assert removed > 0
    assert set(held) == replica.engine.cache.blocks()
    # the token ids are the tokenizer's: the last prompt's first block is its first 16 tokens
    last = tokenizer.request_tokens("/v1/chat/completions", bodies[-1], 10**6)
    assert last is not None and list(last[:16]) in held.values()
    # the replay socket returns the whole ring, then the end marker
    dealer = context.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{replay_port}")
    await dealer.send_multipart((b"", (0).to_bytes(8, "big")))
    replayed = []
    while True:
        _, seq, payload = await asyncio.wait_for(dealer.recv_multipart(), 2)
        if int.from_bytes(seq, "big", signed=True) == -1:
            break
        replayed.append(payload)
    assert replayed == [m[2] for m in messages]
    # reset_prefix_cache publishes AllBlocksCleared
    async with TestClient(TestServer(replica.app)) as client:
        assert (await client.post("/reset_prefix_cache")).status == 200
    cleared = await receive_all(sub)
    assert [msgpack.unpackb(m[2])[1] for m in cleared] == [[["AllBlocksCleared"]]]
    dealer.close(0)
    sub.close(0)
    await publisher.close()


async def test_metrics_use_vllm_names(tokenizer: ModelTokenizer) -> None:
    replica = SimReplica("r0", EngineParams(time_scale=0.0), tokenizer=tokenizer)
    async with TestClient(TestServer(replica.app)) as client:
        text = await (await client.get("/metrics")).text()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f"{name}{{" in text
