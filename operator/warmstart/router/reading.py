"""Read a request body under a size limit, a deadline and a router-wide budget of buffered bytes.

A client that declares a body and then stalls (slowloris) is cut off at the deadline; many of
them together cannot pin more than ``maxBufferedBytes``: every byte read counts against one
budget until the request is done with it, and a request that would exceed the budget is refused.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

_CHUNK = 64 * 1024


class ByteBudget:
    """Request body bytes held by the router right now, against a ceiling."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Reserve ``size`` bytes; False (nothing reserved) if that would pass the ceiling."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class BodyRefused(Exception):
    """Why a body was not read: status, message and error type for the client."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class HeldBody:
    """A body read under a budget; :meth:`release` returns its bytes to the budget (once)."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> bool:
        if not self.budget.take(len(chunk)):
            return False
        self.chunks.append(chunk)
        self.size += len(chunk)
        return True

    def data(self) -> bytes:
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0] if self.chunks else b""

    def release(self) -> None:
        self.budget.give(self.size)
        self.size, self.chunks = 0, []


async def read_body(request: web.Request, limit: int, deadline: float, budget: ByteBudget) -> HeldBody:
    """The body of ``request``; :class:`BodyRefused` if too large, too slow or over the budget.

    On success the caller owns the returned :class:`HeldBody` and must ``release()`` it.
    """
    if request.content_length is not None and request.content_length > limit:
        raise BodyRefused(413, f"request body exceeds {limit} bytes", "request_too_large")
    held = HeldBody(budget)
    if request.content_length is not None and request.content.is_eof():
        # the whole body came with the head (the common case for small bodies): no deadline needed
        chunk = await request.content.read()
        if len(chunk) > limit:
            raise BodyRefused(413, f"request body exceeds {limit} bytes", "request_too_large")
        if not held.add(chunk):
            raise BodyRefused(503, "the router is holding too many request bytes; retry", "overloaded")
        return held
    try:
        async with asyncio.timeout(deadline):
            while chunk := await request.content.read(_CHUNK):
                if held.size + len(chunk) > limit:
                    raise BodyRefused(413, f"request body exceeds {limit} bytes", "request_too_large")
                if not held.add(chunk):
                    raise BodyRefused(503, "the router is holding too many request bytes; retry", "overloaded")
    except TimeoutError:
        held.release()
        raise BodyRefused(408, f"request body not received within {deadline:g} s", "request_timeout") from None
    except BaseException:
        held.release()
        raise
    return held
