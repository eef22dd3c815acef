"""Hostile clients cost the router bounded time and memory: stalled bodies and heads, nesting, hop-by-hop headers, gzip.

Real sockets against an in-process router; backends are small aiohttp apps. Deadlines in the
configuration are short so the tests are quick; the assertions are on what the client receives
and on the router's byte budget, never on how long anything took.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory, SimFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import admin


async def backend_app(app: web.Application) -> tuple[web.AppRunner, str]:
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    return runner, f"http://127.0.0.1:{port}"


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded wait)."""
    return await asyncio.wait_for(reader.read(), timeout=30)


async def test_stalled_bodies_are_cut_off_and_do_not_pin_memory(sims: SimFactory, routers: RouterFactory) -> None:
    [replica] = await sims(1)
    mib = 1024 * 1024
    config = RouterConfig(max_body_bytes=mib, max_buffered_bytes=4 * mib, body_timeout_seconds=1.0)
    router = await routers(config, [replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    budget = router.runner.budget
    held: list[int] = []

    async def stall_one_byte_short() -> bytes:
        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
            f"Content-Length: {mib}\r\n\r\n"
        )
        writer.write(head.encode() + b" " * (mib - 1))
        try:
            await writer.drain()
        except ConnectionError:
            pass
        held.append(budget.held)
        try:
            return await read_until_closed(reader) or b"HTTP/1.1 closed"
        except ConnectionError:
            return b"HTTP/1.1 closed by the router"
        finally:
            writer.close()

    replies = await asyncio.gather(*(stall_one_byte_short() for _ in range(40)))
    statuses = sorted({reply.split(b" ", 2)[1] for reply in replies})
    assert set(statuses) <= {b"408", b"503", b"closed"}  # cut off at the deadline, or refused by the budget
    assert b"408" in statuses
    assert max(held) <= 4 * mib
    assert budget.held == 0
    assert replica.replica.engine.counters.requests == 0


async def test_a_stalled_request_head_is_closed_after_the_header_timeout(routers: RouterFactory) -> None:
    router = await routers(RouterConfig(), [], header_timeout=0.5)
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\n")  # and never the rest
    await writer.drain()
    assert await read_until_closed(reader) == b""  # closed by the router
    writer.close()


async def test_deeply_nested_json_is_a_400_inline_and_in_the_worker(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(strategy="prefixaware"), [replica.url])
    for depth in (20_000, 200_000):  # below and above the size parsed on the event loop
        body = b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}"
        async with client.post(
            router.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 400
            assert "nested" in (await response.json())["error"]["message"]
    assert replica.replica.engine.counters.requests == 0


async def test_hop_by_hop_headers_stop_at_the_router(routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    seen: dict[str, str] = {}

    async def echo(request: web.Request) -> web.Response:
        seen.update({key.lower(): value for key, value in request.headers.items()})
        return web.json_response(
            {"ok": True}, headers={"Connection": "keep-alive, X-Backend-Hop", "X-Backend-Hop": "y", "X-Kept": "z"}
        )

    app = web.Application()
    app.router.add_post("/v1/completions", echo)
    runner, url = await backend_app(app)
    try:
        router = await routers(RouterConfig(), [url])
        headers = {
            "Connection": "keep-alive, X-Client-Hop",
            "X-Client-Hop": "secret",
            "Keep-Alive": "timeout=5",
            "TE": "trailers",
            "Proxy-Authorization": "Basic abc",
            "X-End-To-End": "kept",
        }
        async with client.post(router.url + "/v1/completions", json={"prompt": "x"}, headers=headers) as response:
            assert response.status == 200
            assert "X-Backend-Hop" not in response.headers
            assert response.headers["X-Kept"] == "z"
        for hop in ("x-client-hop", "keep-alive", "te", "proxy-authorization"):
            assert hop not in seen
        assert seen["x-end-to-end"] == "kept"
    finally:
        await runner.cleanup()


async def test_client_sent_forwarding_headers_are_replaced_by_the_routers_own(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    seen: list[list[tuple[str, str]]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append([(key.lower(), value) for key, value in request.headers.items()])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/completions", echo)
    runner, url = await backend_app(app)
    try:
        router = await routers(RouterConfig(), [url])
        forged = {
            "Forwarded": "for=10.0.0.1;host=admin.internal;proto=https",
            "X-Forwarded-For": "10.0.0.1",
            "X-Forwarded-Host": "admin.internal",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Port": "443",
            "X-Forwarded-Prefix": "/admin",
            "X-Real-IP": "10.0.0.1",
        }
        async with client.post(router.url + "/v1/completions", json={"prompt": "x"}, headers=forged) as response:
            assert response.status == 200
        [headers] = seen
        names = [name for name, _ in headers]
        for name in ("forwarded", "x-forwarded-host", "x-forwarded-port", "x-forwarded-prefix", "x-real-ip"):
            assert name not in names
        assert [value for name, value in headers if name == "x-forwarded-for"] == ["127.0.0.1"]
        assert [value for name, value in headers if name == "x-forwarded-proto"] == ["http"]
    finally:
        await runner.cleanup()


async def test_gzip_replies_pass_through_byte_for_byte(routers: RouterFactory) -> None:
    payload = json.dumps({"choices": [{"text": "hello " * 500}]}).encode()
    asked: list[str] = []

    async def maybe_gzip(request: web.Request) -> web.Response:
        accept = request.headers.get("Accept-Encoding", "")
        asked.append(accept)
        if "gzip" in accept:
            return web.Response(
                body=gzip.compress(payload), headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
            )
        return web.Response(body=payload, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/completions", maybe_gzip)
    runner, url = await backend_app(app)
    try:
        router = await routers(RouterConfig(), [url])
        async with aiohttp.ClientSession(auto_decompress=False) as raw_client:
            async with raw_client.post(
                router.url + "/v1/completions", json={"prompt": "x"}, headers={"Accept-Encoding": "gzip"}
            ) as response:
                assert response.headers["Content-Encoding"] == "gzip"
                assert gzip.decompress(await response.read()) == payload
            async with raw_client.post(
                router.url + "/v1/completions", json={"prompt": "x"}, skip_auto_headers=["Accept-Encoding"]
            ) as response:
                assert "Content-Encoding" not in response.headers  # the client asked for no encoding
                assert await response.read() == payload
        assert asked == ["gzip", "identity"]
    finally:
        await runner.cleanup()


async def test_a_large_reply_streams_before_the_replica_has_finished(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    release = asyncio.Event()
    first = b"x" * (1024 * 1024)

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(first)
        await release.wait()  # the rest only after the client has seen the first MiB
        await response.write(b"y" * 1024)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", big)
    runner, url = await backend_app(app)
    try:
        router = await routers(RouterConfig(), [url])
        async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
            assert await asyncio.wait_for(response.content.readexactly(len(first)), timeout=30) == first
            release.set()
            assert await response.content.read() == b"y" * 1024
    finally:
        release.set()
        await runner.cleanup()


async def test_a_replicas_cookie_reaches_its_client_and_is_never_replayed_to_others(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    cookies_seen: list[str | None] = []

    async def set_cookie(request: web.Request) -> web.Response:
        cookies_seen.append(request.headers.get("Cookie"))
        return web.json_response({"ok": True}, headers={"Set-Cookie": "replica-session=abc; Path=/"})

    app = web.Application()
    app.router.add_post("/v1/completions", set_cookie)
    runner, url = await backend_app(app)
    try:
        # by host name: a cookie jar keeps no cookies for bare IP addresses, and would hide the problem
        router = await routers(RouterConfig(), [url.replace("127.0.0.1", "localhost")])
        for _ in range(2):  # two requests from clients that keep no cookies (two clients, as far as we know)
            jarless = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
            async with jarless as other, other.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
                assert response.headers["Set-Cookie"].startswith("replica-session=abc")
        assert cookies_seen == [None, None]
    finally:
        await runner.cleanup()


async def test_a_kept_alive_connection_stays_open_while_used_and_closes_when_idle(routers: RouterFactory) -> None:
    router = await routers(RouterConfig(), [], header_timeout=1.5)
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    # ten requests a quarter second apart: longer in all than the header timeout, never idle that long
    for _ in range(10):
        writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
        await asyncio.sleep(0.25)
    assert await read_until_closed(reader) == b""  # then idle: closed by the router
    writer.close()
