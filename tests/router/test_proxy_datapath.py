"""The router's own HTTP/1.1 data path: kept-alive replica connections, back-pressure, Expect and pipelining.

Real sockets against an in-process router. Replicas are small aiohttp apps or raw asyncio
servers (to close a kept-alive connection at a chosen moment); clients are raw sockets where
the test needs control over what is sent and read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory, SimFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import admin

MIB = 1024 * 1024


async def test_a_kept_alive_connection_the_replica_closed_is_not_an_error(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    """A replica closes an idle connection just as the router reuses it: the request goes out again, once."""
    answered: list[int] = []

    async def one_reply_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # answers the first request on each connection and keeps it open; closes on the next one unanswered,
        # as a server does whose idle keep-alive timer fires while the router's request is on its way
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
        )
        await reader.readexactly(length)
        body = json.dumps({"n": len(answered)}).encode()
        answered.append(1)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(one_reply_per_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        router = await routers(RouterConfig(), [f"http://127.0.0.1:{port}"])
        for n in range(3):
            async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
                assert response.status == 200
                assert (await response.json()) == {"n": n}
        assert len(answered) == 3
        assert router.router.status()["inflight"] == 0
    finally:
        server.close()


async def test_a_client_that_stops_reading_holds_back_the_replica(routers: RouterFactory) -> None:
    """The router does not buffer a large reply for a client that reads slowly: the replica's writes block."""
    total, chunk = 96 * MIB, b"x" * (64 * 1024)
    written = [0]

    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        while written[0] < total:
            await response.write(chunk)
            written[0] += len(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", huge)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        router = await routers(RouterConfig(read_timeout_seconds=60), [f"http://127.0.0.1:{port}"])
        host, router_port = router.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(router_port))
        body = b'{"prompt": "x"}'
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        assert head.startswith(b"HTTP/1.1 200")
        last, stable = -1, 0
        for _ in range(250):  # the client reads nothing until the replica's writes stop moving
            await asyncio.sleep(0.01)
            stable = stable + 1 if written[0] == last else 0
            last = written[0]
            if stable >= 15:
                break
        held_back_at = written[0]
        received = 0
        while chunk_read := await asyncio.wait_for(reader.read(4 * MIB), timeout=30):
            received += len(chunk_read)
            if chunk_read[-5:] == b"0\r\n\r\n":
                break
        writer.close()
        assert held_back_at < 48 * MIB  # socket buffers, not the reply: the rest waited for the client
        assert received > total  # then every byte arrived (plus chunk framing)
        assert router.router.status()["inflight"] == 0
    finally:
        await runner.cleanup()


@dataclasses.dataclass
class EndlessStream:
    """A streaming request through the router to a replica that would stream forever; only the router can end it."""

    router: Any
    replica: Any
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    replica_ended: list[str]


@contextlib.asynccontextmanager
async def endless_stream(routers: RouterFactory, write_timeout: float) -> AsyncIterator[EndlessStream]:
    """The router (one replica slot, the given write timeout) answering one streaming request, its head read."""
    chunk = b"x" * (64 * 1024)
    replica_ended: list[str] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            while True:
                await response.write(b"data: " + chunk + b"\n\n")
        except (ConnectionError, asyncio.CancelledError):
            replica_ended.append("the router closed the replica connection")
            raise

    app = web.Application()
    app.router.add_post("/v1/completions", endless)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        config = RouterConfig(read_timeout_seconds=600, write_timeout_seconds=write_timeout, max_concurrent_requests=1)
        router = await routers(config, [f"http://127.0.0.1:{port}"])
        host, router_port = router.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(router_port), limit=64 * 1024)
        body = b'{"prompt": "x", "stream": true}'
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)).startswith(b"HTTP/1.1 200")
        [replica] = router.router.fleet.replicas()
        yield EndlessStream(router, replica, reader, writer, replica_ended)
        writer.close()
    finally:
        await runner.cleanup()


async def _slot_freed(stream: EndlessStream) -> None:
    for _ in range(600):
        if stream.replica.inflight == 0 and stream.replica_ended:
            break
        await asyncio.sleep(0.01)
    assert stream.replica.inflight == 0
    assert stream.router.router.status()["inflight"] == 0
    assert stream.replica_ended


async def test_a_client_that_never_reads_its_reply_loses_the_connection_and_its_replica_slot(
    routers: RouterFactory,
) -> None:
    """The write deadline: a client whose socket stays full is cut off, and its slot and replica connection go back."""
    async with endless_stream(routers, write_timeout=0.5) as stream:
        await _slot_freed(stream)  # the client reads nothing more; the router gives the slot back by itself
        try:  # what was in the socket buffers, then the end: the router broke the connection
            while await asyncio.wait_for(stream.reader.read(4 * MIB), timeout=30):
                pass
        except ConnectionResetError:
            pass


async def test_a_client_that_reads_a_trickle_loses_the_connection_and_its_replica_slot(
    routers: RouterFactory,
) -> None:
    """The write deadline counts every pause of a response together: a client that reads a little now and then, so
    that no single pause lasts the write timeout, is cut off all the same, and its slot goes back."""
    async with endless_stream(routers, write_timeout=1.0) as stream:
        received = 0
        for _ in range(3000):  # 64 KiB every 10 ms: the client keeps reading, slowly, until the router hangs up
            try:
                data = await asyncio.wait_for(stream.reader.read(64 * 1024), timeout=30)
            except ConnectionResetError:
                break
            if not data:
                break
            received += len(data)
            await asyncio.sleep(0.01)
        assert stream.replica_ended, f"the router kept serving a trickle reader ({received} bytes read)"
        await _slot_freed(stream)


async def test_expect_continue_and_pipelined_requests(sims: SimFactory, routers: RouterFactory) -> None:
    """curl's ``Expect: 100-continue`` gets its interim reply; pipelined requests are answered in order."""
    [replica] = await sims(1)
    router = await routers(RouterConfig(), [replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({"prompt": "p" * 2000, "max_tokens": 1}).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert head.startswith(b"HTTP/1.1 200")
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    await reader.readexactly(length)

    writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\nGET /ready HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")
    rest = await asyncio.wait_for(reader.read(), timeout=30)  # the router closes after the second
    first, second = rest.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200") and b'"status": "ok"' in first
    assert second.startswith(b"200") and b'"replicas": 1' in second
    writer.close()


async def test_a_large_body_over_the_limit_gets_its_413_not_a_reset(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(max_body_bytes=64 * 1024), [replica.url])
    big = b'{"prompt": "' + b"x" * (8 * MIB) + b'"}'
    for _ in range(3):
        async with client.post(
            router.url + "/v1/completions", data=big, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 413
    assert replica.replica.engine.counters.requests == 0


async def test_a_head_request_gets_a_head_only_and_the_connection_stays_usable(
    sims: SimFactory, routers: RouterFactory
) -> None:
    """HEAD /health answers with the GET's headers and no body, so the next response on the connection is intact."""
    [replica] = await sims(1)
    router = await routers(RouterConfig(), [replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"HEAD /health HTTP/1.1\r\nHost: r\r\n\r\nGET /health HTTP/1.1\r\nHost: r\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert first.startswith(b"HTTP/1.1 200") and b"Content-Length: 16" in first
    second = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert second.startswith(b"HTTP/1.1 200"), "the HEAD's body was sent and read as the next response"
    assert await asyncio.wait_for(reader.readexactly(16), timeout=30) == b'{"status": "ok"}'
    writer.close()
