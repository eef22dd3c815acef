"""The traffic port's HTTP/1.1 server: an asyncio protocol over the httptools (llhttp) C parser, with bounded cost.

Per connection: the request head must arrive within ``header_timeout`` (counted from the
connection's opening or from the previous response; the same timer closes idle keep-alive
connections) and be at most :data:`MAX_HEAD_BYTES`; the body must arrive within the
application's body deadline, under its size limit, the client's share of the byte budget and
the router-wide budget, or the client gets 408, 413, 429 or 503 and the connection is closed.
Trailer fields after a chunked body are dropped, never added to the request's headers; they, chunk
extensions and oversized chunk framing count together against :data:`MAX_TRAILER_BYTES` (431
beyond it). The application's handler runs once the whole body is held; a client that hangs up
cancels it. Responses are written straight to
the transport; a relay that must not outrun the client registers as the connection's
``follower``, which is paused while the client's socket is full. A socket that stays full for the
application's write timeout breaks the connection, which cancels the handler (and so releases
whatever it holds, a replica slot included).
Requests pipelined on one connection are answered in order, one at a time. A request the server
refuses itself is answered in its place too, after the responses to the requests before it (which
are completed; what the client sends meanwhile is dropped, nothing after the refused request is
parsed), and then the connection is closed; an interim ``100 Continue`` waits likewise.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, cast

import httptools

from warmstart.router.forwarding import Origin
from warmstart.router.reading import ByteBudget, HeldBody, Refusal

log = logging.getLogger(__name__)

#: Largest request head (request line and headers) accepted.
MAX_HEAD_BYTES = 64 * 1024
#: Bytes a request may send besides its head and body bytes: chunk framing beyond
#: :data:`_CHUNK_FRAMING_BYTES` per chunk, chunk extensions and trailer fields (which are dropped).
MAX_TRAILER_BYTES = 8 * 1024
#: Framing allowed per chunk (size line and CRLFs) before it counts against :data:`MAX_TRAILER_BYTES`.
_CHUNK_FRAMING_BYTES = 32
#: Pipelined requests held per connection before it stops reading.
_MAX_PIPELINED = 4
#: Seconds a refused connection keeps reading (and dropping) what the client still sends, so that
#: the client reads the error instead of a reset.
LINGER_SECONDS = 2.0
#: Seconds a client is asked to wait (``Retry-After``) after the byte budget was full.
RETRY_AFTER_SECONDS = 1
_RETRY_AFTER = ((b"Retry-After", str(RETRY_AFTER_SECONDS).encode()),)

Headers = list[tuple[bytes, bytes]]


class Request:
    """One parsed request: method, target, lowercased header names, the body held under its client's budget share."""

    __slots__ = ("body", "headers", "keep_alive", "method", "origin", "peer", "target", "version")

    def __init__(
        self, method: bytes, target: bytes, headers: Headers, peer: str | None, origin: Origin, budget: ByteBudget
    ) -> None:
        self.method = method
        self.target = target
        """The request target as sent (path and query)."""
        self.headers = headers
        """(lowercased name, value) pairs in arrival order."""
        self.peer = peer
        """The TCP peer's address."""
        self.origin = origin
        """The client whose shares the request counts against (the peer, or whom a trusted proxy forwards for)."""
        self.body = HeldBody(budget, origin.client)
        self.keep_alive = True
        self.version = b"1.1"

    @property
    def path(self) -> bytes:
        query = self.target.find(b"?")
        return self.target if query < 0 else self.target[:query]

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lowercase), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class Follower(Protocol):
    """Where a response's bytes come from: paused while the client cannot take more."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class Application(Protocol):
    """What the server needs from the application it serves."""

    budget: ByteBudget

    def body_limits(self) -> tuple[int, float]:
        """(largest body in bytes, seconds a body may take to arrive) for the next request."""
        ...

    def origin(self, peer: str | None, headers: Headers) -> Origin:
        """Who sent a request with ``headers`` from TCP ``peer`` (its shares of the budget are that client's)."""
        ...

    def write_timeout(self) -> float:
        """Seconds a client may keep its socket full (not reading its reply) before the connection is broken."""
        ...

    def handle(self, request: Request, connection: Connection) -> Awaitable[None]:
        """Answer ``request`` on ``connection`` (exactly one whole response)."""
        ...

    def refused(self, status: int) -> None:
        """The server refuses a request with ``status`` itself (malformed, too large, too slow, over the budget)."""
        ...


_STATUS_LINES = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode()) for status in http.HTTPStatus
}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return b"HTTP/1.1 %d Unknown\r\n" % status if line is None else line


def json_body(status: int, message: str, kind: str) -> bytes:
    """An OpenAI-style JSON error body."""
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


class Connection(asyncio.Protocol):
    """One client connection: parse requests, run the handler per request, write its response."""

    def __init__(
        self, app: Application, loop: asyncio.AbstractEventLoop, header_timeout: float, open_: set[Connection]
    ) -> None:
        self.app, self.loop, self.header_timeout, self._open = app, loop, header_timeout, open_
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.closed = False
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers: Headers = []
        self._head_bytes = 0
        self._extra_bytes = 0
        """Bytes of the request being received that are neither head nor body (framing, trailers)."""
        self._chunks = 0
        self._trailer_bytes = 0
        self._request: Request | None = None
        #: the request being answered is a HEAD: its response has a head only
        self.answering_head = False
        """The request whose head or body is being received."""
        self._limit = 0
        self._continue = False
        """The request being received asked for ``100 Continue`` and has not had it yet."""
        self._refusal: tuple[int, bytes, tuple[tuple[bytes, bytes], ...]] | None = None
        """(status, body, headers) of the error that ends the connection, once the responses before it are out."""
        self._ready: deque[Request] = deque()
        self._task: asyncio.Task[None] | None = None
        """The connection's serving task: started by its first request, then waiting between requests."""
        self._next: asyncio.Future[None] | None = None
        """What the serving task awaits while no request is ready."""
        self._serving = False
        """A request is being answered (its response may be partly written)."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_due: float | None = None
        """When the awaited request head must be complete; None while a request is being served."""
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_deadline = 0.0
        self._linger: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        """Armed while the client's socket is full: breaks the connection once the response's full-socket time (all
        its pauses together, so a client that reads a trickle now and then gains nothing) passes the write timeout."""
        self._full_since: float | None = None
        self._full_seconds = 0.0
        """How long the client's socket has been full while this response was written, pauses before this one."""
        self._paused = False
        self._writable = True
        self.keep_alive = True
        """False once the current response must be the connection's last."""
        self.follower: Follower | None = None
        """The source of the response being relayed, paused while the client's socket is full."""

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self._open.add(self)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._open.discard(self)
        self._cancel_timers()
        self._cancel_write_timer()
        if self._linger is not None:
            self._linger.cancel()
        if self._request is not None:
            self._request.body.release()
            self._request = None
        while self._ready:
            self._ready.popleft().body.release()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client went away: stop working for it

    @property
    def _answering(self) -> bool:
        """A request before the one being received is being answered, or waits for the serving task."""
        return self._serving or bool(self._ready)

    @property
    def _reading(self) -> bool:
        """Requests are still parsed: the connection is open and no request was refused."""
        return not self.closed and self._refusal is None

    def data_received(self, data: bytes) -> None:
        if not self._reading:
            return  # after a refusal: dropped, so that the client reads its answers rather than a reset
        receiving = self._request
        if receiving is None:
            self._head_bytes += len(data)
        body_before = 0 if receiving is None else receiving.body.size
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported", "invalid_request_error")
        except httptools.HttpParserError:
            self._refuse(400, "malformed HTTP request", "invalid_request_error")
            return
        if not self._reading:
            return
        if self._request is None and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(431, "request head too large", "invalid_request_error")
        elif receiving is not None and self._request is receiving and self._over_extra(data, receiving, body_before):
            self._refuse(431, "request trailers or chunk framing too large", "invalid_request_error")
        elif self._request is not None and self._body_timer is None:
            # the body is still coming: from now on it has a deadline
            self._body_timer = self.loop.call_at(self._body_deadline, self._body_late)

    def pause_writing(self) -> None:
        self._writable = False
        if self.follower is not None:
            self.follower.pause_reading()
        self._full_since = self.loop.time()
        if self._write_timer is None:
            left = max(0.0, self.app.write_timeout() - self._full_seconds)
            self._write_timer = self.loop.call_later(left, self._write_late)

    def resume_writing(self) -> None:
        self._writable = True
        if self._full_since is not None:
            self._full_seconds += self.loop.time() - self._full_since
            self._full_since = None
        self._cancel_write_timer()
        if self.follower is not None:
            self.follower.resume_reading()

    # ---- parser callbacks

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._request is None:
            self._headers.append((name.lower(), value))
            return
        # after the body, fields are trailers: dropped, and counted (also when they came in one read with the head)
        self._trailer_bytes += len(name) + len(value) + 4
        if self._trailer_bytes > MAX_TRAILER_BYTES:
            self._refuse(431, "request trailers too large", "invalid_request_error")

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_headers_complete(self) -> None:
        if not self._reading:
            return
        self._head_due = None  # the timer stays armed: it is pushed back, not re-created, per request
        limit, deadline = self.app.body_limits()
        origin = self.app.origin(self.peer, self._headers)
        request = Request(self._parser.get_method(), self._url, self._headers, self.peer, origin, self.app.budget)
        request.keep_alive = self._parser.should_keep_alive()
        request.version = self._parser.get_http_version().encode()
        length = request.header(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            self._refuse(413, f"request body exceeds {limit} bytes", "request_too_large")
            return
        if not request.body.open():
            self._refuse_share("request bodies at once")
            return
        self._request, self._limit = request, limit
        self._extra_bytes = self._chunks = self._trailer_bytes = 0
        self._body_deadline = self.loop.time() + deadline
        if request.header(b"expect") == b"100-continue":
            self._continue = True
            if not self._answering:  # else once the responses before it are out
                self._send_continue()

    def on_body(self, body: bytes) -> None:
        request = self._request
        if request is None or not self._reading:
            return
        if request.body.size + len(body) > self._limit:
            self._refuse(413, f"request body exceeds {self._limit} bytes", "request_too_large")
            return
        refusal = request.body.add(body)
        if refusal is Refusal.CLIENT_SHARE:
            self._refuse_share("request bytes")
        elif refusal is Refusal.ROUTER_FULL:
            self._refuse(503, "the router is holding too many request bytes; retry", "overloaded", _RETRY_AFTER)

    def on_message_complete(self) -> None:
        request = self._request
        if request is None or not self._reading:
            return
        if self._parser.should_upgrade():  # the parser stops here (HttpParserUpgrade): refuse this request
            self._refuse(400, "protocol upgrades are not supported", "invalid_request_error")
            return
        request.body.complete()
        self._request = None
        self._continue = False
        self._head_bytes = 0
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._ready.append(request)
        if self._next is not None:  # the serving task waits: wake it (cheaper than a task per request)
            waiting, self._next = self._next, None
            waiting.set_result(None)
        elif self._task is None:
            self._task = self.loop.create_task(self._serve())
        elif len(self._ready) >= _MAX_PIPELINED and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def _over_extra(self, data: bytes, request: Request, body_before: int) -> bool:
        """Count ``data``'s bytes that were not body; True once they pass the trailer limit."""
        self._extra_bytes += len(data) - (request.body.size - body_before)
        return self._extra_bytes > MAX_TRAILER_BYTES + _CHUNK_FRAMING_BYTES * self._chunks

    # ---- serving

    async def _serve(self) -> None:
        """Answer the ready requests in order; in between, wait for the next (cancelled with the connection)."""
        while not self.closed:
            if not self._ready:
                self._serving = False
                if self._refusal is not None:  # the responses before a refused request are out: now its error
                    self._send_refusal()
                    break
                if self._request is None:
                    self._arm_head_timer()
                elif self._continue:
                    self._send_continue()
                self._next = self.loop.create_future()
                await self._next
                continue
            self._serving = True
            self._full_seconds = 0.0  # each response gets the whole write timeout
            if self._full_since is not None:
                self._full_since = self.loop.time()
            request = self._ready.popleft()
            self.keep_alive = request.keep_alive
            self.answering_head = request.method == b"HEAD"
            try:
                await self.app.handle(request, self)
            except Exception:
                log.exception("request handler failed")
                self.keep_alive = False
                self.respond(500, json_body(500, "internal router error", "internal_error"))
            finally:
                request.body.release()
                self.answering_head = False
            if not self.keep_alive:
                self.close()
                break
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
        self._serving = False

    # ---- writing (for handlers)

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    @property
    def writable(self) -> bool:
        """False while the client's socket is full (``pause_writing``)."""
        return self._writable

    def head(self, status: int, headers: Iterable[tuple[bytes, bytes]], framing: bytes) -> bytes:
        """A response head: status line, ``headers``, then ``framing`` (Content-Length or chunked lines)."""
        lines = [status_line(status)]
        for name, value in headers:
            lines += (name, b": ", value, b"\r\n")
        lines.append(framing)
        if not self.keep_alive:
            lines.append(b"Connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def respond(
        self,
        status: int,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]] = (),
        content_type: bytes = b"application/json; charset=utf-8",
    ) -> None:
        """A whole response in one write (without its body when answering a HEAD request)."""
        pairs = [(b"Content-Type", content_type), *headers]
        head = self.head(status, pairs, b"Content-Length: %d\r\n" % len(body))
        self.write(head if self.answering_head else head + body)

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        """Break the connection (the response cannot be completed)."""
        if self.transport is not None:
            self.closed = True
            self.transport.abort()

    # ---- internals

    def _refuse(self, status: int, message: str, kind: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        """Refuse the request being received before the handler runs, and end the connection.

        Nothing more is parsed; the error goes out once the responses to the requests before it are.
        """
        if not self._reading:
            return
        if self._request is not None:
            self._request.body.release()
            self._request = None
        self._cancel_timers()
        self._continue = False
        self._refusal = (status, json_body(status, message, kind), tuple(headers))
        self.app.refused(status)
        if not self._answering:  # no response to an earlier request is still to be written
            self._send_refusal()

    def _refuse_share(self, what: str) -> None:
        """Refuse a request of a client that holds its share of the router's budget already (429)."""
        message = f"this client holds its share of the router's {what}; retry"
        self._refuse(429, message, "rate_limit_exceeded", _RETRY_AFTER)

    def _send_refusal(self) -> None:
        if self._refusal is None or self.closed:
            return
        status, body, headers = self._refusal
        self.keep_alive = False
        self.respond(status, body, headers)
        self._close_lingering()

    def _send_continue(self) -> None:
        self._continue = False
        self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _close_lingering(self) -> None:
        """Send what is written and end our side; drop what still comes in; close after a while."""
        if self.closed or self.transport is None:
            return
        self.closed = True  # nothing more is parsed or written
        try:
            self.transport.write_eof()
        except (OSError, RuntimeError, NotImplementedError):
            self.transport.close()
            return
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _arm_head_timer(self) -> None:
        """Expect the next request head within ``header_timeout`` (one timer per connection, re-armed when it fires)."""
        self._head_due = self.loop.time() + self.header_timeout
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_due, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        due = self._head_due
        if due is None:
            return  # a request is being served; the next response arms the timer again
        if due > self.loop.time():  # pushed back since it was armed
            self._head_timer = self.loop.call_at(due, self._head_late)
            return
        if not self._serving and self._request is None:
            self.close()  # an idle keep-alive connection, or a head that never completed

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_late(self) -> None:
        """The client left its socket full for the whole write timeout, in one pause or in all of this response's pauses
        together: break the connection (cancels the handler)."""
        self._write_timer = None
        if not self._writable:
            log.info("closing a connection whose client left its reply unread for %g s", self.app.write_timeout())
            self.abort()

    def _body_late(self) -> None:
        self._body_timer = None
        if self._request is not None:
            deadline = self.app.body_limits()[1]
            self._refuse(408, f"request body not received within {deadline:g} s", "request_timeout")


class Server:
    """A listening traffic port."""

    def __init__(self, server: asyncio.Server, app: Application, connections: set[Connection]) -> None:
        self._server, self.app, self._connections = server, app, connections

    @property
    def port(self) -> int:
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self._server.close()
        for connection in list(self._connections):
            connection.abort()
        await self._server.wait_closed()


async def serve(app: Application, host: str, port: int, header_timeout: float = 15.0) -> Server:
    """Listen on ``host:port`` (0 = any free port) and serve ``app``."""
    loop = asyncio.get_running_loop()
    connections: set[Connection] = set()
    factory: Callable[[], Connection] = lambda: Connection(app, loop, header_timeout, connections)  # noqa: E731
    server = await loop.create_server(factory, host, port, reuse_address=True)
    return Server(server, app, connections)
