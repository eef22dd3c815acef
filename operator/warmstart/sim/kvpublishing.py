"""Publish a simulated replica's KV-cache events exactly as vLLM does: ZMQ PUB, msgpack batches, a replay socket.

Configured by the same JSON as vLLM's ``--kv-events-config`` (``enable_kv_cache_events``,
``publisher`` ``"zmq"`` or ``"null"``, ``endpoint`` default ``tcp://*:5557``, ``replay_endpoint``,
``buffer_steps``, ``hwm``, ``topic``; other vLLM fields are accepted and ignored). As in vLLM, an
endpoint with ``*``, ``::``, ``ipc://`` or ``inproc://`` is bound, any other is connected to, and
replica i of a multi-replica sim adds i to the TCP ports (vLLM's data-parallel rank offset).

Each message is ``(topic, seq as 8 bytes big-endian, msgpack(EventBatch))`` with vLLM's msgspec
array encoding: ``[ts, [event, ...], data_parallel_rank]``, events ``["BlockStored", block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]``, ``["BlockRemoved",
block_hashes, medium]`` and ``["AllBlocksCleared"]``. The last ``buffer_steps`` batches are kept
for the replay ROUTER socket: a client sends ``(identity, "", start seq)`` frames (a DEALER sends
``("", start)``) and receives ``("", seq, payload)`` for every kept batch from ``start`` on, then
``("", -1, "")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from warmstart.sim.engine import StoredRun

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)


@dataclass(frozen=True)
class KVEventsConfig:
    """vLLM's ``KVEventsConfig`` fields the sim honours (same names, same defaults)."""

    enable_kv_cache_events: bool = False
    publisher: str = "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    topic: str = ""

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        """Parse ``--kv-events-config`` JSON; ``ValueError`` with the reason when it is not valid."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("--kv-events-config must be a JSON object")
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        config = cls(**known)
        if config.publisher not in ("zmq", "null"):
            raise ValueError(f"unknown KV events publisher {config.publisher!r} (zmq or null)")
        if not isinstance(config.buffer_steps, int) or config.buffer_steps < 1:
            raise ValueError("buffer_steps must be a positive integer")
        if config.enable_kv_cache_events and config.publisher == "null" and "publisher" not in data:
            config = cls(**{**known, "publisher": "zmq"})  # vLLM defaults to zmq once events are enabled
        return config

    @property
    def publishing(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


def offset_endpoint(endpoint: str, offset: int) -> str:
    """A TCP endpoint with ``offset`` added to its port (vLLM's data-parallel rank offset)."""
    if not offset or not endpoint.startswith("tcp://"):
        return endpoint
    match = re.search(r":(\d+)$", endpoint)
    if match is None:
        return endpoint
    return endpoint[: match.start()] + f":{int(match.group(1)) + offset}"


def _binds(endpoint: str) -> bool:
    return any(marker in endpoint for marker in ("*", "::", "ipc://", "inproc://"))


def stored(block_hashes: Sequence[int], parent: int | None, token_ids: Sequence[int], block_size: int) -> list[Any]:
    """A ``BlockStored`` event in vLLM's array encoding."""
    return ["BlockStored", list(block_hashes), parent, list(token_ids), block_size, None, "GPU", None]


def removed(block_hashes: Sequence[int]) -> list[Any]:
    """A ``BlockRemoved`` event in vLLM's array encoding."""
    return ["BlockRemoved", list(block_hashes), "GPU"]


def cleared() -> list[Any]:
    """An ``AllBlocksCleared`` event in vLLM's array encoding."""
    return ["AllBlocksCleared"]


def encode_batch(events: list[list[Any]], ts: float, rank: int | None = None) -> bytes:
    """``EventBatch(ts, events, data_parallel_rank)`` in vLLM's array encoding."""
    payload: bytes = msgpack.packb([ts, events, rank], use_bin_type=True)
    return payload


class Publisher:
    """One replica's ZMQ publisher: PUB socket, replay ring and ROUTER socket."""

    def __init__(self, config: KVEventsConfig, offset: int = 0, context: zmq.asyncio.Context | None = None) -> None:
        self.config = config
        self.endpoint = offset_endpoint(config.endpoint, offset)
        self.replay_endpoint = offset_endpoint(config.replay_endpoint, offset) if config.replay_endpoint else None
        self._context = context or zmq.asyncio.Context.instance()
        self._pub = self._context.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        (self._pub.bind if _binds(self.endpoint) else self._pub.connect)(self.endpoint)
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        if self.replay_endpoint is not None:
            self._replay = self._context.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(self.replay_endpoint)
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self.seq = 0
        self._topic = config.topic.encode()
        self.published: list[list[Any]] = []
        """Every event published, in order, while :attr:`recording` (for tests)."""
        self.recording = False

    def start(self) -> None:
        """Serve replay requests (call on the event loop)."""
        if self._replay is not None and self._replay_task is None:
            self._replay_task = asyncio.create_task(self._serve_replay(), name="kv-events-replay")

    def publish(self, events: list[list[Any]]) -> None:
        """Send one batch (no-op for an empty one); never blocks (PUB drops beyond its high-water mark)."""
        if not events:
            return
        payload = encode_batch(events, time.time())
        seq = self.seq
        self.seq += 1
        self._ring.append((seq, payload))
        if self.recording:
            self.published.extend(events)
        with contextlib.suppress(zmq.Again):
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                log.warning("ignoring a malformed KV-event replay request")
                continue
            client, _, start_frame = frames
            start = int.from_bytes(start_frame, "big")
            for seq, payload in list(self._ring):
                if seq >= start:
                    await self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            await self._replay.send_multipart((client, b"", END_SEQ, b""))

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            await asyncio.gather(self._replay_task, return_exceptions=True)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)


class CacheEvents:
    """The engine cache's listener: turns its changes into vLLM events on a :class:`Publisher`."""

    def __init__(self, publisher: Publisher, block_size: int) -> None:
        self.publisher = publisher
        self.block_size = block_size

    def changed(self, stored_runs: list[StoredRun], evicted: list[int]) -> None:
        events = [stored(run.hashes, run.parent, run.token_ids, self.block_size) for run in stored_runs]
        if evicted:
            events.append(removed(evicted))
        self.publisher.publish(events)

    def cleared(self) -> None:
        self.publisher.publish([cleared()])
