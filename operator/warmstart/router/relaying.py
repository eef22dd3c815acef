"""Pass a replica's reply back to the client, streamed with bounded buffering, bytes untouched.

Small replies of known length are read whole and answered in one write; everything else (SSE,
large or unknown-length bodies) is copied chunk by chunk as it arrives, with the client's
write back-pressure limiting what is held to the client session's read buffer plus one chunk.
The first byte of the reply ends the request's share of its replica's prefill backlog and is
the router's time to first byte (TTFT) for that replica.
"""

from __future__ import annotations

import json
import logging
import time

import aiohttp

from warmstart.router.headers import relayed_response_headers
from warmstart.router.httpserver import Connection, Request, json_body
from warmstart.router.metrics import RouterMetrics
from warmstart.router.replicas import Replica

log = logging.getLogger(__name__)

#: Replies of known length up to this size are read whole before answering.
WHOLE_REPLY_BYTES = 64 * 1024


class PrefillClaim:
    """A request's share of its replica's estimated prefill backlog, released exactly once."""

    __slots__ = ("chars", "replica")

    def __init__(self, replica: Replica, chars: int) -> None:
        self.replica, self.chars = replica, chars
        replica.prefill_chars += chars

    def release(self) -> None:
        if self.chars:
            self.replica.prefill_chars -= self.chars
            self.chars = 0


def _error_event(message: str) -> bytes:
    payload = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _outcome(status: int) -> str:
    return "ok" if status < 500 else "error"


class Relay:
    """One reply's trip back: first-byte bookkeeping, then a whole or streamed copy."""

    def __init__(self, metrics: RouterMetrics, replica: Replica, claim: PrefillClaim, started: float) -> None:
        self.metrics, self.replica, self.claim, self.started = metrics, replica, claim, started
        self._first = True

    def first_byte(self) -> None:
        if self._first:
            self._first = False
            self.claim.release()  # this request's prefill is over
            self.metrics.ttft_of(self.replica.url).observe(time.perf_counter() - self.started)

    async def run(
        self, request: Request, connection: Connection, upstream: aiohttp.ClientResponse, added: float
    ) -> str:
        """Relay the reply to ``connection``; the outcome label."""
        headers = relayed_response_headers(list(upstream.raw_headers))
        sse = upstream.content_type == "text/event-stream"
        length = upstream.content_length
        if not sse and length is not None and length <= WHOLE_REPLY_BYTES:
            try:
                data = await upstream.read()
            except (TimeoutError, aiohttp.ClientError):
                error = json_body(502, "model replica failed while responding", "upstream_error")
                connection.respond(502, error)
                return "error"
            self.first_byte()
            self.metrics.added_seconds.observe(added)
            head = connection.head(upstream.status, headers, b"Content-Length: %d\r\n" % len(data))
            connection.write(head + data)
            return _outcome(upstream.status)
        relay_started = time.perf_counter()
        chunked = length is None and request.version == b"1.1"
        if length is not None:
            framing = b"Content-Length: %d\r\n" % length
        elif chunked:
            framing = b"Transfer-Encoding: chunked\r\n"
        else:  # an HTTP/1.0 client: the end of the body is the end of the connection
            connection.keep_alive = False
            framing = b""
        connection.write(connection.head(upstream.status, headers, framing))
        self.metrics.added_seconds.observe(added + time.perf_counter() - relay_started)
        return await self._copy(connection, upstream, sse, chunked)

    async def _copy(self, connection: Connection, upstream: aiohttp.ClientResponse, sse: bool, chunked: bool) -> str:
        outcome = _outcome(upstream.status)
        tail = b"\n\n"
        while True:
            try:
                chunk = await upstream.content.readany()
            except (TimeoutError, aiohttp.ClientError) as exc:
                log.warning("replica reply ended abnormally: %s", type(exc).__name__)
                if not sse:  # headers are out: only a broken connection tells the client
                    connection.abort()
                    return "error"
                # close any half-sent event first, so the error is an event of its own
                chunk = (b"" if tail.endswith(b"\n\n") else b"\n\n") + _error_event(
                    "model replica stream ended abnormally"
                )
                outcome = "error"
                connection.write(_frame(chunk) if chunked else chunk)
                break
            if not chunk:
                break
            self.first_byte()
            tail = (tail + chunk)[-2:]
            connection.write(_frame(chunk) if chunked else chunk)
            try:
                await connection.drain()
            except ConnectionResetError:  # our client went away
                return "aborted"
        self.first_byte()
        if chunked:
            connection.write(b"0\r\n\r\n")
        if connection.closed:
            return "aborted"
        return outcome


def _frame(chunk: bytes) -> bytes:
    """``chunk`` as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(chunk), chunk)
