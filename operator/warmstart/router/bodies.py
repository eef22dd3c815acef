"""Turn a request body into what routing needs (prompt head, prompt length, session value) at bounded cost.

Routing needs only the first ``maxBlocks x blockChars`` characters of the rendered prompt, its
length and the session field; the body itself is forwarded as the bytes the client sent. Small
bodies are parsed on the event loop (a few milliseconds at most). Larger ones are parsed in one
separate worker process: the C JSON parser holds the GIL for the whole document, so a thread would
not keep the loop responsive, and a body of millions of empty messages costs seconds of CPU and
hundreds of MiB while parsed. The worker parses one body at a time, so that cost is bounded too.
Bodies waiting for it are queued per client address and served round-robin over addresses: a
client that sends many huge bodies delays another's prompt by at most the one body being parsed,
not by all of its queue. The queue itself is bounded by the byte budget and its per-client shares.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from warmstart.router.prefixes import rendered_head

#: Bodies up to this size are parsed on the event loop (worst case measured: a few ms).
INLINE_BYTES = 64 * 1024


class BadBody(ValueError):
    """The body is not a JSON object the router can route (the message is safe to return)."""


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """What routing sees of a body: no more prompt text than it hashes."""

    head: str
    """The first ``limit`` characters of the rendered prompt."""

    chars: int
    """Length of the whole rendered prompt in characters."""

    session: str | None
    """The body's session field, when it is a string or an integer."""

    request: dict[str, Any] | None = None
    """The parsed body, kept for bodies parsed inline (for tokenization); None for large bodies."""


def parse_body(raw: bytes, limit: int, session_field: str, keep: bool = False) -> ParsedBody:
    """Parse ``raw`` and reduce it to a :class:`ParsedBody`; :class:`BadBody` if it is not a JSON object."""
    try:
        body = json.loads(_text(raw))
    except RecursionError:
        raise BadBody("request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise BadBody("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadBody("request body must be a JSON object")
    head, chars = rendered_head(body, limit)
    value = body.get(session_field)
    session = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
    return ParsedBody(head, chars, session, body if keep else None)


def _text(raw: bytes) -> str | bytes:
    """``raw`` decoded when it is plainly UTF-8 (it opens an object with a non-NUL byte), else as is.

    ``json.loads`` of bytes first guesses their encoding from the leading bytes (UTF-8/16/32, a
    BOM); for a body that opens with ``{`` followed by a byte other than NUL that guess is always
    UTF-8, so decoding here (as it would: ``surrogatepass``) skips it. Anything else is left to it.
    """
    if raw[:1] == b"{" and raw[1:2] != b"\x00":
        return raw.decode("utf-8", "surrogatepass")
    return raw


class _Job:
    """One body waiting for the worker, and the future its request awaits."""

    __slots__ = ("done", "limit", "raw", "session_field")

    def __init__(self, raw: bytes, limit: int, session_field: str, done: asyncio.Future[ParsedBody]) -> None:
        self.raw, self.limit, self.session_field, self.done = raw, limit, session_field, done


class BodyParser:
    """Parse small bodies inline and large ones in a single worker process (started on first use), fairly by client."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._queues: dict[str | None, deque[_Job]] = {}
        """Waiting bodies per client address, in round-robin order (the client being served is not in it)."""
        self._serving: tuple[str | None, deque[_Job]] | None = None
        """The client whose body the worker parses, and its other waiting bodies: back into the round after it."""
        self._running: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        """Bodies waiting for the worker (not counting the one it parses)."""
        serving = len(self._serving[1]) if self._serving is not None else 0
        return serving + sum(len(queue) for queue in self._queues.values())

    async def parse(self, raw: bytes, limit: int, session_field: str, client: str | None = None) -> ParsedBody:
        if len(raw) <= INLINE_BYTES:
            return parse_body(raw, limit, session_field, keep=True)
        job = _Job(raw, limit, session_field, asyncio.get_running_loop().create_future())
        queue = self._queue_of(client)
        queue.append(job)
        self._next()
        try:
            return await job.done
        finally:
            if not job.done.done():  # the request went away while its body waited: forget it
                job.done.cancel()
                if job in queue:
                    queue.remove(job)
                    if not queue and self._queues.get(client) is queue:
                        del self._queues[client]

    def _queue_of(self, client: str | None) -> deque[_Job]:
        if self._serving is not None and self._serving[0] == client:
            return self._serving[1]
        queue = self._queues.get(client)
        if queue is None:
            queue = self._queues[client] = deque()
        return queue

    def _next(self) -> None:
        """Start the worker on the oldest body of the next client in the round, if it is idle."""
        if self._running is not None:
            return
        if self._serving is not None:  # the client just served goes to the back of the round
            client, queue = self._serving
            self._serving = None
            if queue:
                self._queues[client] = queue
        if not self._queues:
            return
        client = next(iter(self._queues))
        queue = self._queues.pop(client)
        job = queue.popleft()
        self._serving = (client, queue)
        self._running = asyncio.get_running_loop().create_task(self._run(job))

    async def _run(self, job: _Job) -> None:
        try:
            if self._pool is None:
                # spawn: the router runs watch threads, and a forked child would inherit their locks
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
            loop = asyncio.get_running_loop()
            try:
                parsed = await loop.run_in_executor(self._pool, parse_body, job.raw, job.limit, job.session_field)
            except BrokenProcessPool:  # the worker died (e.g. out of memory): start a new one next time
                self._pool = None
                error: BaseException = BadBody("request body could not be parsed within the router's limits")
                if not job.done.done():
                    job.done.set_exception(error)
            except Exception as exc:  # noqa: BLE001 - BadBody and anything else go to the request that sent it
                if not job.done.done():
                    job.done.set_exception(exc)
            else:
                if not job.done.done():
                    job.done.set_result(parsed)
        finally:
            self._running = None
            if not job.done.done():
                job.done.cancel()
            self._next()

    def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            self._running = None
        queues = list(self._queues.values()) + ([self._serving[1]] if self._serving is not None else [])
        for queue in queues:
            for job in queue:
                job.done.cancel()
        self._queues.clear()
        self._serving = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
