"""Router replicas tell each other their picks and in-flight counts, so every replica routes on one view.

Each router binds a ZMQ PULL socket on the sync port and connects one PUSH socket to each peer
(:mod:`warmstart.router.peerdiscovery` finds them). What it sends (:mod:`warmstart.router.peerwire`):

- its **picks** as it makes them (the replica and the request's text and token block keys), batched
  for ``flush_seconds`` so that a busy router sends one message for many;
- its **in-flight counts** per replica, absolute, with every message: a freed slot sends one within
  ``settle_seconds`` unless a pick's message goes sooner (a lost message is healed by the next);
- a **heartbeat** when it has said nothing for ``heartbeat_seconds``.

What it does with a peer's message: it checks it (MAC, shape, replay, rate: :mod:`~.peerwire`,
:mod:`~.peerstate`; a failure is dropped and counted by reason), enters each pick through the policy's
own bookkeeping (the text index and request shares as if this router had placed it; with KV events,
a speculative entry that lasts ``speculativeTtlSeconds`` unless the engine's events confirm it), and
counts the peer's in-flight requests in the load it balances by. A peer silent for ``timeout``
seconds stops counting. Sends never block: a peer that does not read loses messages, not this router's
time. All of it runs on the event loop (the socket's descriptor is watched with ``add_reader``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable

import zmq

from warmstart.router import peerwire
from warmstart.router.peermetrics import PeerMetrics
from warmstart.router.peerstate import Limits, PeerBook
from warmstart.router.peerwire import Message, Pick, Rejected
from warmstart.router.prefixes import PromptKey
from warmstart.router.routing import Router

log = logging.getLogger(__name__)

#: messages queued for a peer that is not reading before sends to it are dropped
SEND_QUEUE = 1000
#: messages read per wake-up before yielding to requests
READ_BATCH = 256


class PeerSync:
    """One router's side of the sync: its listening socket, a sender per peer, and the book of what peers said."""

    def __init__(
        self,
        router: Router,
        key: bytes,
        port: int,
        host: str = "0.0.0.0",
        *,
        limits: Limits | None = None,
        flush_seconds: float = 0.002,
        settle_seconds: float = 0.05,
        heartbeat_seconds: float = 0.5,
        metrics: PeerMetrics | None = None,
    ) -> None:
        if len(key) < 16:
            raise ValueError("the sync key must be at least 16 bytes")
        self.router, self.key, self.host, self.port = router, key, host, port
        self.flush_seconds, self.settle_seconds, self.heartbeat_seconds = (
            flush_seconds,
            settle_seconds,
            heartbeat_seconds,
        )
        cap = router.config.max_concurrent_requests
        if limits is None:
            limits = Limits(timeout=max(3.0, 6 * heartbeat_seconds), max_inflight=cap or Limits().max_inflight)
        self.book = PeerBook(limits)
        self.metrics = metrics or PeerMetrics(router.metrics.registry)
        self.sender = os.urandom(peerwire.SENDER_BYTES)
        self._seq = 0
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._pull: zmq.Socket[bytes] | None = None
        self._pushes: dict[str, zmq.Socket[bytes]] = {}
        self._picks: list[Pick] = []
        self._sent_inflight: dict[str, int] = {}
        self._flush: asyncio.TimerHandle | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._last_sent = 0.0

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> int:
        """Bind the sync port (returns it: 0 picks a free one), start the heartbeat, and hook into the router."""
        self._loop = asyncio.get_running_loop()
        pull = self._context.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.MAXMSGSIZE, peerwire.MAX_PAYLOAD_BYTES + 1024)  # a bigger message drops its connection
        pull.setsockopt(zmq.RCVHWM, 10_000)
        if self.port:
            pull.bind(f"tcp://{self.host}:{self.port}")
        else:
            self.port = pull.bind_to_random_port(f"tcp://{self.host}")
        self._pull = pull
        self._fd = int(pull.getsockopt(zmq.FD))
        self._loop.add_reader(self._fd, self._readable)
        self.router.share_picks(self, self.book.inflight())
        self._heartbeat = asyncio.create_task(self._beat(), name="router-peer-heartbeat")
        self._loop.call_soon(self._readable)  # the descriptor is edge-triggered: look once now
        return self.port

    async def stop(self) -> None:
        self.router.share_picks(None, {})
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        if self._flush is not None:
            self._flush.cancel()
        if self._pull is not None and self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._pull.close()
            self._pull = None
        self.set_peers([])

    def set_peers(self, addresses: Iterable[str]) -> None:
        """Send to exactly these peers (``tcp://host:port``; this router's own address is left out by the caller)."""
        wanted = set(addresses)
        for address in set(self._pushes) - wanted:
            self._pushes.pop(address).close()
        for address in sorted(wanted - set(self._pushes)):
            push = self._context.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 0)
            push.setsockopt(zmq.SNDHWM, SEND_QUEUE)
            push.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for a peer that is not connected
            push.connect(address)
            self._pushes[address] = push
        self.metrics.peers.set(len(self._pushes))
        if wanted:
            log.info("sync peers: %d", len(self._pushes))

    # --- sending ---------------------------------------------------------------------------------------

    def picked(self, replica: str, key: PromptKey) -> None:
        """The router placed a request on ``replica`` (called from the policy's ``placed``): send within
        ``flush_seconds``."""
        self._picks.append(Pick(replica, key.blocks, key.anchor, key.token_blocks))
        self._schedule(self.flush_seconds)

    def changed(self) -> None:
        """A slot was freed (or taken): send within ``settle_seconds``, with the next pick's message if sooner."""
        self._schedule(self.settle_seconds)

    def _schedule(self, delay: float) -> None:
        loop = self._loop
        if loop is None:
            return
        due = loop.time() + delay
        flush = self._flush
        if flush is not None:
            if flush.when() <= due:
                return
            flush.cancel()
        self._flush = loop.call_at(due, self._send)

    def _send(self, heartbeat: bool = False) -> None:
        if self._flush is not None:
            self._flush.cancel()
        self._flush = None
        started = time.thread_time()
        inflight = {replica.url: replica.inflight for replica in self.router.fleet.replicas() if replica.inflight > 0}
        if not self._picks and inflight == self._sent_inflight and not heartbeat:
            return
        picks, self._picks = self._picks[: peerwire.MAX_PICKS], self._picks[peerwire.MAX_PICKS :]
        self._seq += 1
        message = Message(self.sender, self._seq, int(time.time() * 1000), inflight, tuple(picks))
        self._sent_inflight = inflight
        self._last_sent = time.monotonic()
        frames = peerwire.encode(message, self.key)
        for push in self._pushes.values():
            try:
                push.send_multipart(frames, flags=zmq.NOBLOCK)
            except zmq.Again:
                self.metrics.unsent.inc()
        self.metrics.sent.inc()
        if self._picks:
            self._schedule(self.flush_seconds)
        self.metrics.cpu.inc(time.thread_time() - started)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            started = time.thread_time()
            if self.book.expire(time.monotonic()):
                log.info("a sync peer fell silent; its in-flight counts no longer count")
            self.metrics.live.set(self.book.live(time.monotonic()))
            self.metrics.cpu.inc(time.thread_time() - started)
            if time.monotonic() - self._last_sent >= self.heartbeat_seconds:  # quiet: say so; else the news did
                self._send(heartbeat=True)
            self._readable()  # belt and braces: an edge missed by the descriptor is read now

    # --- receiving -------------------------------------------------------------------------------------

    def _readable(self) -> None:
        pull = self._pull
        if pull is None:
            return
        started = time.thread_time()
        for _ in range(READ_BATCH):
            # asking the socket is cheaper than the exception an empty read raises
            if not int(pull.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                break
            self.receive(pull.recv_multipart(flags=zmq.NOBLOCK))
        else:
            assert self._loop is not None
            self._loop.call_soon(self._readable)  # more waiting: read on after the requests already due
        self.metrics.cpu.inc(time.thread_time() - started)

    def receive(self, frames: list[bytes]) -> None:
        """Check one message and apply it, or drop and count it."""
        router = self.router
        try:
            message = peerwire.decode(frames, self.key)
            if message.sender == self.sender:
                return  # our own message (this router listed itself as a peer)
            picks = self.book.admit(message, time.monotonic(), int(time.time() * 1000), router.fleet_urls())
        except Rejected as rejected:
            self.metrics.dropped(rejected.reason.value).inc()
            return
        self.metrics.received.inc()
        if picks:
            started = time.thread_time()
            record = router.record_pick
            for pick in picks:
                record(pick.replica, PromptKey(pick.blocks, 0, anchor=pick.anchor, token_blocks=pick.token_blocks))
            self.metrics.picks.inc(len(picks))
            self.metrics.apply_cpu.inc(time.thread_time() - started)

    def status(self) -> dict[str, object]:
        """For ``/router/status``: the port, the peers sent to, and what each peer last said."""
        return {
            "port": self.port,
            "sendingTo": len(self._pushes),
            "peers": self.book.status(time.monotonic()),
            "clippedClaims": self.book.clipped,
        }
