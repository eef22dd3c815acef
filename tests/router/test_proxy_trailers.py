"""Trailer fields after a chunked body are dropped and bounded: never forwarded as headers, 431 past a small limit.

Real sockets: an in-process router for what reaches the replica, and a real ``warmstart router``
process for memory, attacked over one connection with the trailer fields of the review (8 KB
fields, and tiny ``a:b`` fields that cost the most per byte sent). Asserted: the 431, the closed
connection and the router's resident memory, never how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from proxyharness import RouterFactory
from routerprocess import MIB, router_process
from warmstart.api.routers import RouterConfig
from warmstart.router import admin, httpserver

BODY = b'{"prompt": "hello"}'
HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n" % (len(BODY), BODY)
)


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A replica that records each request's headers (names lowercased) and answers a small JSON reply."""
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        seen.append({key.lower(): value for key, value in request.headers.items()})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def status_of(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    return head.split(b" ", 2)[1]


async def test_trailers_never_reach_the_replica_as_headers(
    echo: tuple[str, list[dict[str, str]]], routers: RouterFactory
) -> None:
    url, seen = echo
    router = await routers(RouterConfig(), [url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(HEAD + b"X-Injected: yes\r\nAuthorization: Bearer stolen\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n")
    await writer.drain()
    assert await status_of(reader) == b"200"
    writer.close()
    [headers] = seen
    assert "x-injected" not in headers
    assert "authorization" not in headers
    assert headers["x-forwarded-for"] == "127.0.0.1"


async def test_trailers_past_the_limit_are_refused_with_431(
    echo: tuple[str, list[dict[str, str]]], routers: RouterFactory
) -> None:
    url, seen = echo
    router = await routers(RouterConfig(), [url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    field = b"X-Pad: " + b"p" * 1000 + b"\r\n"
    writer.write(HEAD + field * (httpserver.MAX_TRAILER_BYTES // len(field) + 2) + b"\r\n")
    await writer.drain()
    assert await status_of(reader) == b"431"
    assert b"trailers" in await asyncio.wait_for(reader.read(), timeout=30)  # the error, then the close
    writer.close()
    assert seen == []  # nothing was forwarded
    assert router.runner.budget.held == 0


@pytest.mark.parametrize(
    ("field", "attack_bytes"),
    [(b"X-Pad: " + b"p" * 8192 + b"\r\n", 64 * MIB), (b"a:b\r\n", 8 * MIB)],
    ids=["8KB-fields", "tiny-fields"],
)
async def test_one_connection_of_trailers_cannot_grow_the_router(
    echo: tuple[str, list[dict[str, str]]], field: bytes, attack_bytes: int
) -> None:
    url, seen = echo
    async with router_process([url]) as router:
        before = peak = router.rss()
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        writer.write(HEAD)
        batch = field * (MIB // len(field))
        sent = 0
        try:
            while sent < attack_bytes:
                writer.write(batch)
                await writer.drain()
                sent += len(batch)
                peak = max(peak, router.rss())
            writer.write(b"\r\n")
            await writer.drain()
        except ConnectionError:
            pass  # the router closed the connection: what the fix does
        status = await status_of(reader)
        peak = max(peak, router.rss())
        writer.close()
    print(f"{len(field)}-byte trailer fields: sent {sent / MIB:.0f} MiB, router RSS +{(peak - before) / MIB:.1f} MiB")
    assert status == b"431"
    assert peak - before < 16 * MIB
    assert seen == []
