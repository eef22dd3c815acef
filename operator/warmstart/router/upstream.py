"""Replica connections: a keep-alive HTTP/1.1 connection pool per replica, one request/response exchange at a time.

A request is written as its head plus the body bytes the client sent; the response is parsed by
the httptools (llhttp) C parser and its body handed, chunk by chunk as it arrives, to a sink (the
relay to the client). While the client cannot take more, the relay pauses reading from the
replica (:meth:`ReplicaConnection.pause_reading`), so what the router holds of a reply stays
bounded by one socket read. Replies are never decoded: bytes and ``Content-Encoding`` pass as they
are. A connection goes back to its replica's pool only after a complete response it may keep
alive; idle ones are closed after :data:`IDLE_SECONDS` (below the 5 s keep-alive of uvicorn, the
server of vLLM and SGLang, so the router does not reuse a connection the replica is closing). A
request that finds its reused connection closed before any byte of a response is sent once more
on a new connection (the replica closed it idle, so it never saw the request).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

#: Seconds an idle connection is kept for reuse.
IDLE_SECONDS = 4.0
#: Bodies up to this size are written together with the request head.
_JOIN_BYTES = 16 * 1024

Headers = list[tuple[bytes, bytes]]


class ConnectFailed(OSError):
    """The replica could not be connected to (refused, unreachable): safe to try another replica."""


class UpstreamFailed(Exception):
    """The replica's connection broke, or it sent something that is not HTTP/1.1."""


class _ClosedBeforeReply(UpstreamFailed):
    """A reused connection was closed before any byte of the response: the request may be resent."""


@functools.lru_cache(maxsize=1024)
@functools.lru_cache(maxsize=4096)
def address(base: str) -> tuple[str, int, bytes, bytes]:
    """(host, port, Host header, path prefix) of a replica's base URL ``http://host:port[/prefix]``.

    Cached: it is asked for on every request, and parsing a URL cost more than the rest of the request head.
    """
    parts = urlsplit(base)
    host = parts.hostname or "localhost"
    port = parts.port or 80
    return host, port, (parts.netloc or host).encode(), parts.path.rstrip("/").encode()


class Exchange:
    """One request's response: status and headers, then body chunks to a sink, then the end."""

    __slots__ = (
        "chunked",
        "content_type",
        "done",
        "head",
        "headers",
        "length",
        "pending",
        "received",
        "sink",
        "status",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0
        self.headers: Headers = []
        self.length: int | None = None
        """Content-Length of the response, when it has one."""
        self.chunked = False
        self.content_type: bytes | None = None
        """The response's Content-Type value, when it has one."""
        self.received = 0
        """Bytes of the response received so far (head included)."""
        self.head: asyncio.Future[None] = loop.create_future()
        """Resolves when status and headers are in (or fails)."""
        self.done: asyncio.Future[None] = loop.create_future()
        """Resolves when the whole response is in (or fails)."""
        self.sink: Callable[[bytes], None] | None = None
        self.pending: list[bytes] = []
        """Body chunks received before a sink was attached."""

    def attach(self, sink: Callable[[bytes], None]) -> None:
        """From now on, hand body chunks to ``sink`` (those already received first)."""
        pending, self.pending = self.pending, []
        for chunk in pending:
            sink(chunk)
        self.sink = sink

    def body(self) -> bytes:
        """The body received while no sink was attached."""
        return b"".join(self.pending)

    def fail(self, exc: BaseException) -> None:
        for future in (self.head, self.done):
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: a failure nobody awaits is not logged


class ReplicaConnection(asyncio.Protocol):
    """One keep-alive connection to a replica."""

    def __init__(self, loop: asyncio.AbstractEventLoop, key: str) -> None:
        self.loop, self.key = loop, key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._exchange: Exchange | None = None
        self._keep_alive = False
        self._paused = False
        self._read_timeout = 0.0
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        exchange, self._exchange = self._exchange, None
        if exchange is None:
            return
        if exchange.head.done() and exchange.length is None and not exchange.chunked and exc is None:
            if not exchange.done.done():  # a body delimited by the end of the connection: complete
                exchange.done.set_result(None)
            return
        if exchange.received == 0 and self.reused:
            exchange.fail(_ClosedBeforeReply("the replica closed the kept-alive connection"))
        else:
            exchange.fail(UpstreamFailed("the replica closed the connection mid-response"))

    def data_received(self, data: bytes) -> None:
        exchange = self._exchange
        if exchange is None:
            self.close()  # bytes nobody asked for: this connection is not reusable
            return
        exchange.received += len(data)
        self._last_read = self.loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._exchange = None
            exchange.fail(UpstreamFailed(f"the replica's response is not valid HTTP/1.1: {exc}"))
            self.close()

    # ---- parser callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._exchange is not None:
            self._exchange.headers.append((name, value))

    def on_headers_complete(self) -> None:
        exchange = self._exchange
        if exchange is None:
            return
        exchange.status = self._parser.get_status_code()
        for name, value in exchange.headers:
            lower = name.lower()
            if lower == b"content-length" and value.strip().isdigit():
                exchange.length = int(value)
            elif lower == b"transfer-encoding" and b"chunked" in value.lower():
                exchange.chunked = True
            elif lower == b"content-type" and exchange.content_type is None:
                exchange.content_type = value
        if not exchange.head.done():
            exchange.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        exchange = self._exchange
        if exchange is None:
            return
        if exchange.sink is None:
            exchange.pending.append(body)
        else:
            exchange.sink(body)

    def on_message_complete(self) -> None:
        exchange, self._exchange = self._exchange, None
        self._keep_alive = self._parser.should_keep_alive()
        if exchange is not None and not exchange.done.done():
            exchange.done.set_result(None)

    # ---- use

    def send(self, head: bytes, body: bytes, read_timeout: float) -> Exchange:
        """Write one request and return its exchange."""
        assert self._exchange is None and self.transport is not None
        exchange = self._exchange = Exchange(self.loop)
        self._keep_alive = False
        self._read_timeout = read_timeout
        self._last_read = now = self.loop.time()
        if self._timer is None or self._timer_due > now + read_timeout:
            self._arm_timer(now + read_timeout)
        if len(body) <= _JOIN_BYTES:
            self.transport.write(head + body)  # one write, one segment: the common small request
        else:
            self.transport.write(head)  # a large body is not copied again
            self.transport.write(body)
        return exchange

    def reusable(self) -> bool:
        """A complete response, kept alive, and the connection still open."""
        return self._exchange is None and self._keep_alive and not self.closed and not self._paused

    def pause_reading(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self._last_read = self.loop.time()  # the wait for the client does not count as silence
            self.transport.resume_reading()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.abort()

    # ---- read timeout: one timer per connection, pushed back while data keeps coming; it outlives
    # an exchange (lapsing when it fires with none) so that a kept-alive connection's next
    # exchange needs no new timer

    def _arm_timer(self, due: float) -> None:
        self._stop_timer()
        self._timer, self._timer_due = self.loop.call_at(due, self._check_read), due

    def _check_read(self) -> None:
        self._timer = None
        exchange = self._exchange
        if exchange is None or self.closed:
            return
        due = self._last_read + self._read_timeout
        if self._paused or due > self.loop.time():
            self._arm_timer(max(due, self.loop.time() + 0.05))
            return
        self._exchange = None
        exchange.fail(TimeoutError("the replica sent nothing within the read timeout"))
        self.close()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Pool:
    """Idle keep-alive connections, per replica base URL."""

    def __init__(self) -> None:
        self._idle: dict[str, list[ReplicaConnection]] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(
        self, base: str, head: bytes, body: bytes, connect_timeout: float, read_timeout: float
    ) -> tuple[ReplicaConnection, Exchange]:
        """Send a request (``head`` with the Host header, ``body``) to ``base``; once its response head is in.

        Raises :class:`ConnectFailed` (not connected: try elsewhere), :class:`UpstreamFailed` or
        ``TimeoutError``. The caller must :meth:`release` or close the connection.
        """
        connection = self._reuse(base)
        if connection is not None:
            exchange = connection.send(head, body, read_timeout)
            try:
                await exchange.head
                return connection, exchange
            except _ClosedBeforeReply:
                pass  # the replica had closed it idle: send once more on a new connection
            except BaseException:
                connection.close()
                raise
        connection = await self._open(base, connect_timeout)
        exchange = connection.send(head, body, read_timeout)
        try:
            await exchange.head
        except BaseException:
            connection.close()
            raise
        return connection, exchange

    def release(self, connection: ReplicaConnection) -> None:
        """Keep ``connection`` for the next request to its replica, if it can be reused."""
        if not connection.reusable():
            connection.close()
            return
        loop = connection.loop
        connection.idle_since = loop.time()
        connection.reused = True
        self._idle.setdefault(connection.key, []).append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_later(IDLE_SECONDS, self._sweep)

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _reuse(self, base: str) -> ReplicaConnection | None:
        idle = self._idle.get(base)
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to be closing
            if not connection.closed and connection.loop.time() - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _open(self, base: str, connect_timeout: float) -> ReplicaConnection:
        host, port, _, _ = address(base)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout):
                _, protocol = await loop.create_connection(lambda: ReplicaConnection(loop, base), host, port)
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectFailed(exc.errno, f"cannot connect to {base}: {exc.strerror or exc}") from exc
        return protocol

    def _sweep(self) -> None:
        """Close connections idle for too long (also those of replicas that left)."""
        self._sweeper = None
        if not self._idle:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key in list(self._idle):
            kept = [c for c in self._idle[key] if not c.closed and now - c.idle_since < IDLE_SECONDS]
            for connection in self._idle[key]:
                if connection not in kept:
                    connection.close()
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]
        if self._idle:
            self._sweeper = loop.call_later(IDLE_SECONDS, self._sweep)


def request_head(method: bytes, target: bytes, host: bytes, headers: Headers, length: int | None) -> bytes:
    """An HTTP/1.1 request head: request line, Host, ``headers``, and Content-Length unless ``length`` is None."""
    lines = [method, b" ", target, b" HTTP/1.1\r\nHost: ", host, b"\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    if length is not None:
        lines.append(b"Content-Length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)
