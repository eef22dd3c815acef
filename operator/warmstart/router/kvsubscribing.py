"""Follow every replica's KV-event stream (ZMQ SUB), with vLLM's replay socket for gaps.

One subscription per ready replica, opened when discovery adds it and closed when it goes, so
every router replica holds the same index. Per replica the follower tracks the last sequence
number applied and handles the stream's faults:

* the first batch seen, or a gap (a sequence number skipped: a dropped message, a subscriber that
  joined late), is filled through the replay socket from the next expected number; a replay that
  does not start there (the engine's ring no longer holds it), times out or is not configured is
  an **unreplayable gap**: the replica's entries are dropped and the stream goes on from here;
* a sequence number that goes backwards is a **publisher restart**: the replica's entries are
  dropped (its cache restarted empty);
* ``AllBlocksCleared`` drops them too (applied by the index).

A replica is *live* once a batch has been applied from it; until then (an engine that publishes
nothing, or not yet), the policy routes it by the router's own text index.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from warmstart._routing_core import EventIndex
from warmstart.router import kvevents

log = logging.getLogger(__name__)


@dataclass
class StreamState:
    """What the router knows of one replica's event stream (shown in ``/router/status``)."""

    endpoint: str
    replay_endpoint: str | None
    last_seq: int | None = None
    batches: int = 0
    events: int = 0
    gaps: int = 0
    replays: int = 0
    drops: int = 0
    restarts: int = 0
    decode_errors: int = 0
    lag_seconds: float | None = None
    last_batch_at: float | None = None
    drop_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.batches > 0

    def to_dict(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "replayEndpoint": self.replay_endpoint,
            "live": self.live,
            "lastSeq": self.last_seq,
            "batches": self.batches,
            "events": self.events,
            "gaps": self.gaps,
            "replays": self.replays,
            "drops": dict(self.drop_reasons),
            "lagSeconds": None if self.lag_seconds is None else round(self.lag_seconds, 6),
        }


@dataclass(frozen=True)
class EventPorts:
    """Where a replica publishes: ports absolute, or relative to its HTTP port (one host, many replicas)."""

    port: int
    replay_port: int | None
    relative: bool = False

    def endpoints(self, url: str) -> tuple[str, str | None]:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        base = (parts.port or 80) if self.relative else 0
        replay = None if self.replay_port is None else f"tcp://{host}:{base + self.replay_port}"
        return f"tcp://{host}:{base + self.port}", replay


Observer = Callable[[str, str, float], None]
"""``(replica, what, value)``: a fault or a lag sample, for metrics."""


class Follower:
    """Subscriptions to every replica's KV events, applied to one :class:`EventIndex`."""

    def __init__(
        self,
        index: EventIndex,
        ports: EventPorts,
        replay_timeout: float = 1.0,
        observer: Observer | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.index = index
        self.ports = ports
        self.replay_timeout = replay_timeout
        self.observer = observer or (lambda replica, what, value: None)
        self.streams: dict[str, StreamState] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._context = context or zmq.asyncio.Context.instance()

    def live(self, replica: str) -> bool:
        stream = self.streams.get(replica)
        return stream is not None and stream.live

    def set_replicas(self, urls: list[str]) -> None:
        """Subscribe to new replicas and unsubscribe (and forget) the ones gone."""
        for url in list(self._tasks):
            if url not in urls:
                self._tasks.pop(url).cancel()
                self.streams.pop(url, None)
                self.index.clear(url)
        for url in urls:
            if url not in self._tasks:
                endpoint, replay = self.ports.endpoints(url)
                self.streams[url] = StreamState(endpoint, replay)
                self._tasks[url] = asyncio.create_task(self._follow(url), name=f"kv-events {endpoint}")

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, url: str) -> None:
        stream = self.streams[url]
        socket = self._context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(stream.endpoint)
        log.info("following KV events of %s at %s", url, stream.endpoint)
        try:
            while True:
                frames = await socket.recv_multipart()
                try:
                    await self.receive(url, frames)
                except Exception as exc:  # noqa: BLE001 - one bad message must not end the subscription
                    stream.decode_errors += 1
                    self.observer(url, "decode_error", 1)
                    log.warning("KV event message from %s not applied: %s", url, type(exc).__name__)
        finally:
            socket.close(linger=0)

    async def receive(self, url: str, frames: list[bytes]) -> None:
        """Apply one message ``(topic, seq, payload)`` from ``url``, handling gaps and restarts."""
        stream = self.streams.get(url)
        if stream is None:
            return
        try:
            if len(frames) < 2:
                raise kvevents.DecodeError("a message has fewer than two frames")
            seq = kvevents.decode_seq(frames[-2])
            batch = kvevents.decode_batch(frames[-1])
        except kvevents.DecodeError as exc:
            stream.decode_errors += 1
            self.observer(url, "decode_error", 1)
            log.warning("undecodable KV event message from %s: %s", url, exc)
            return
        last = stream.last_seq
        if last is not None and seq <= last:
            self._drop(url, stream, "restart")
            stream.restarts += 1
        elif seq != (0 if last is None else last + 1):
            await self._fill(url, stream, 0 if last is None else last + 1, seq)
            if stream.last_seq is not None and seq <= stream.last_seq:
                return  # the replay already applied this batch
        self._apply(url, stream, seq, batch)

    async def _fill(self, url: str, stream: StreamState, start: int, upto: int) -> None:
        """Replay batches [start, upto) from the engine's ring; drop the replica's entries if a gap cannot be.

        On joining (nothing applied yet) whatever the ring still holds is applied: blocks stored
        before it are missing (their children are not indexed), but nothing wrong is indexed.
        """
        joining = stream.last_seq is None
        if not joining:
            stream.gaps += 1
            self.observer(url, "gap", 1)
        replayed = await self._replay(stream, start) if stream.replay_endpoint else None
        if replayed is None or (not joining and (not replayed or replayed[0][0] != start)):
            if not joining:
                self._drop(url, stream, "unreplayable_gap")
            stream.last_seq = upto - 1
            return
        stream.replays += 1
        self.observer(url, "replay", 1)
        for seq, payload in replayed:
            if seq >= upto:
                break
            try:
                batch = kvevents.decode_batch(payload)
            except kvevents.DecodeError:
                stream.decode_errors += 1
                continue
            self._apply(url, stream, seq, batch)
        stream.last_seq = upto - 1

    async def _replay(self, stream: StreamState, start: int) -> list[tuple[int, bytes]] | None:
        assert stream.replay_endpoint is not None
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(stream.replay_endpoint)
        replayed: list[tuple[int, bytes]] = []
        try:
            await socket.send_multipart((b"", start.to_bytes(8, "big")))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.replay_timeout
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                frames = await asyncio.wait_for(socket.recv_multipart(), remaining)
                seq = kvevents.decode_seq(frames[-2])
                if seq < 0:
                    return replayed
                replayed.append((seq, frames[-1]))
        except (TimeoutError, kvevents.DecodeError, IndexError, zmq.ZMQError):
            return None
        finally:
            socket.close(linger=0)

    def _apply(self, url: str, stream: StreamState, seq: int, batch: kvevents.Batch) -> None:
        self.index.apply_batch(url, batch)
        stream.last_seq = seq
        stream.batches += 1
        stream.events += len(batch)
        now = time.time()
        stream.last_batch_at = now
        if batch.ts > 0:
            stream.lag_seconds = max(0.0, now - batch.ts)
            self.observer(url, "lag", stream.lag_seconds)
        if batch.cleared:
            stream.drop_reasons["cleared"] = stream.drop_reasons.get("cleared", 0) + 1
            self.observer(url, "drop:cleared", 1)

    def _drop(self, url: str, stream: StreamState, reason: str) -> None:
        self.index.clear(url)
        stream.drops += 1
        stream.drop_reasons[reason] = stream.drop_reasons.get(reason, 0) + 1
        self.observer(url, f"drop:{reason}", 1)
        log.warning("dropped the KV index entries of %s: %s", url, reason.replace("_", " "))
