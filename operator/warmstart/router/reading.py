"""The router-wide budget of buffered request bytes, and a body held against it.

Many slow or stalled clients together cannot pin more than ``maxBufferedBytes``: every body
byte received counts against one budget until the request is done with it, and a request that
would exceed the budget is refused (:mod:`warmstart.router.httpserver` enforces it as bytes arrive).
"""

from __future__ import annotations


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
