"""The budget of buffered request bytes, router-wide and per client address, and a body held against it.

Many slow or stalled clients together cannot pin more than ``maxBufferedBytes``: every body
byte received counts against one budget until the request is done with it, and a request that
would exceed the budget is refused (:mod:`warmstart.router.httpserver` enforces it as bytes arrive).
One client address cannot take the whole budget either: it holds at most
``maxBufferedBytesPerClient`` of it, and sends at most ``maxBodiesPerClient`` bodies at once
(counted from a request's head until its body is complete), so a client that fills its share is
refused while others still get through. The client is the TCP peer, or behind a proxy the router
trusts, the address that proxy forwards for (:mod:`warmstart.router.forwarding`).
"""

from __future__ import annotations

import enum

from warmstart.api.routers import RouterConfig


class Refusal(enum.IntEnum):
    """Why a body (or its next bytes) was not taken: the HTTP status that says so."""

    CLIENT_SHARE = 429
    """This client address holds its share already."""
    ROUTER_FULL = 503
    """The router-wide budget is full."""


class ClientShare:
    """What one client address holds now: body bytes, and bodies still being received."""

    __slots__ = ("held", "receiving")

    def __init__(self) -> None:
        self.held = 0
        self.receiving = 0


class ByteBudget:
    """Request body bytes held by the router right now, against a ceiling and per-client shares."""

    def __init__(self, limit: int, client_limit: int | None = None, client_bodies: int | None = None) -> None:
        self.limit = limit
        self.client_limit = limit if client_limit is None else client_limit
        """Bytes one client address may hold at once."""
        self.client_bodies = client_bodies
        """Bodies one client address may send at once; None = no limit."""
        self.held = 0
        self.clients: dict[str | None, ClientShare] = {}
        """Shares of the client addresses holding something now (forgotten when they hold nothing)."""

    def open(self, client: str | None) -> ClientShare | None:
        """A new body from ``client`` starts arriving; None (nothing counted) if it already sends its limit."""
        share = self.clients.get(client)
        if share is None:
            share = self.clients[client] = ClientShare()
        elif self.client_bodies is not None and share.receiving >= self.client_bodies:
            return None
        share.receiving += 1
        return share

    def take(self, size: int, share: ClientShare) -> Refusal | None:
        """Reserve ``size`` bytes for ``share``; why not (nothing reserved) if that would pass a ceiling."""
        if share.held + size > self.client_limit:
            return Refusal.CLIENT_SHARE
        if self.held + size > self.limit:
            return Refusal.ROUTER_FULL
        self.held += size
        share.held += size
        return None

    def give(self, size: int, share: ClientShare, client: str | None, receiving: bool) -> None:
        self.held -= size
        share.held -= size
        if receiving:
            share.receiving -= 1
        if share.held <= 0 and share.receiving <= 0 and self.clients.get(client) is share:
            del self.clients[client]


class HeldBody:
    """A body read under a budget; :meth:`release` returns its bytes (and its client's body slot) once."""

    __slots__ = ("budget", "chunks", "client", "receiving", "share", "size")

    def __init__(self, budget: ByteBudget, client: str | None) -> None:
        self.budget, self.client = budget, client
        self.chunks: list[bytes] = []
        self.size = 0
        self.share: ClientShare | None = None
        self.receiving = False

    def open(self) -> bool:
        """Count this body as one its client is sending; False if the client sends its limit already."""
        self.share = self.budget.open(self.client)
        self.receiving = self.share is not None
        return self.receiving

    def add(self, chunk: bytes) -> Refusal | None:
        share = self.share
        if share is None:
            return Refusal.CLIENT_SHARE
        refusal = self.budget.take(len(chunk), share)
        if refusal is None:
            self.chunks.append(chunk)
            self.size += len(chunk)
        return refusal

    def complete(self) -> None:
        """The whole body is in: it no longer counts as one its client is sending (its bytes still count)."""
        if self.receiving and self.share is not None:
            self.receiving = False
            self.share.receiving -= 1

    def data(self) -> bytes:
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0] if self.chunks else b""

    def release(self) -> None:
        if self.share is not None:
            self.budget.give(self.size, self.share, self.client, self.receiving)
        self.size, self.chunks, self.share, self.receiving = 0, [], None, False


def configured(config: RouterConfig, budget: ByteBudget | None = None) -> ByteBudget:
    """A budget with ``config``'s ceilings: ``budget`` resized in place (what it holds stays counted), or a new one."""
    if budget is None:
        return ByteBudget(config.max_buffered_bytes, config.max_buffered_bytes_per_client, config.max_bodies_per_client)
    budget.limit = config.max_buffered_bytes
    budget.client_limit = config.max_buffered_bytes_per_client
    budget.client_bodies = config.max_bodies_per_client
    return budget
