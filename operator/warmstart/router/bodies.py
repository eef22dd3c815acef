"""Turn a request body into what routing needs (prompt head, prompt length, session value) at bounded cost.

Routing needs only the first ``maxBlocks x blockChars`` characters of the rendered prompt, its
length and the session field; the body itself is forwarded as the bytes the client sent. Small
bodies are parsed on the event loop (a few milliseconds at most). Larger ones are parsed in one
separate worker process: the C JSON parser holds the GIL for the whole document, so a thread would
not keep the loop responsive, and a body of millions of empty messages costs seconds of CPU and
hundreds of MiB while parsed. The worker parses one body at a time, so that cost is bounded too.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
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


class BodyParser:
    """Parse small bodies inline and large ones in a single worker process (started on first use)."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def parse(self, raw: bytes, limit: int, session_field: str) -> ParsedBody:
        if len(raw) <= INLINE_BYTES:
            return parse_body(raw, limit, session_field, keep=True)
        if self._pool is None:
            # spawn: the router runs watch threads, and a forked child would inherit their locks
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, parse_body, raw, limit, session_field)
        except BrokenProcessPool:  # the worker died (e.g. out of memory): start a new one next time
            self._pool = None
            raise BadBody("request body could not be parsed within the router's limits") from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
