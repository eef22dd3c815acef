"""Pass a replica's reply back to the client, streamed with bounded buffering, bytes untouched.

Small replies of known length are read whole and answered in one write; everything else (SSE,
large or unknown-length bodies) is written to the client chunk by chunk as it arrives (chunked
replies stay chunked, one chunk per read), and while the client's socket is full reading from the
replica pauses, so what the router holds is one socket read plus the client transport's buffer.
The first byte of the reply ends the request's share of its replica's prefill backlog and is
the router's time to first byte (TTFT) for that replica.
"""

from __future__ import annotations

import json
import logging
import time

from warmstart.router.headers import relayed_response_headers
from warmstart.router.httpserver import Connection, Request, json_body
from warmstart.router.metrics import RouterMetrics
from warmstart.router.replicas import Replica
from warmstart.router.upstream import Exchange, ReplicaConnection, UpstreamFailed

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
        self, request: Request, client: Connection, upstream: ReplicaConnection, exchange: Exchange, added: float
    ) -> str:
        """Relay the reply whose head is in ``exchange`` to ``client``; the outcome label."""
        status = exchange.status
        headers = relayed_response_headers(exchange.headers)
        sse = _is_sse(exchange.content_type)
        length = exchange.length
        if not sse and length is not None and length <= WHOLE_REPLY_BYTES:
            try:
                await exchange.done  # usually in already: small replies come in one read
            except (TimeoutError, UpstreamFailed):
                client.respond(502, json_body(502, "model replica failed while responding", "upstream_error"))
                return "error"
            data = exchange.body()
            self.first_byte()
            self.metrics.added_seconds.observe(added)
            client.write(client.head(status, headers, b"Content-Length: %d\r\n" % len(data)) + data)
            return _outcome(status)
        relay_started = time.perf_counter()
        chunked = length is None and request.version == b"1.1"
        if length is not None:
            framing = b"Content-Length: %d\r\n" % length
        elif chunked:
            framing = b"Transfer-Encoding: chunked\r\n"
        else:  # an HTTP/1.0 client: the end of the body is the end of the connection
            client.keep_alive = False
            framing = b""
        client.write(client.head(status, headers, framing))
        self.metrics.added_seconds.observe(added + time.perf_counter() - relay_started)
        tail = [b"\n\n"]

        def sink(chunk: bytes) -> None:
            if self._first:
                self.first_byte()
            if sse:
                tail[0] = (tail[0] + chunk)[-2:]
            client.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)

        outcome = _outcome(status)
        client.follower = upstream  # the client's back-pressure pauses reading from the replica
        if not client.writable:
            upstream.pause_reading()
        try:
            exchange.attach(sink)
            await exchange.done
        except (TimeoutError, UpstreamFailed) as exc:
            log.warning("replica reply ended abnormally: %s", type(exc).__name__)
            if not sse:  # headers are out: only a broken connection tells the client
                client.abort()
                return "error"
            # close any half-sent event first, so the error is an event of its own
            event = (b"" if tail[0].endswith(b"\n\n") else b"\n\n") + _error_event(
                "model replica stream ended abnormally"
            )
            client.write(b"%x\r\n%s\r\n" % (len(event), event) if chunked else event)
            outcome = "error"
        finally:
            client.follower = None
        self.first_byte()
        if chunked:
            client.write(b"0\r\n\r\n")
        if client.closed:
            return "aborted"
        return outcome


def _is_sse(content_type: bytes | None) -> bool:
    return content_type is not None and content_type.split(b";", 1)[0].strip().lower() == b"text/event-stream"
