"""Pipelined requests on one connection are answered in request order, refusals included.

A client pipelines a request whose reply the replica streams slowly, then a request the router
refuses itself (413, 400 malformed or upgrade, 431, 408, 503): the client must read the first
response complete, byte for byte, then the refusal, then the end of the connection; nothing sent
after a refused request is answered, and an interim ``100 Continue`` waits its turn too. Real
sockets against an in-process router; the replica is a small aiohttp app that holds the rest of
its reply until the test has seen the router refuse the second request (counted as a
``bad_request``) or end the connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from aiohttp import web

from proxyharness import RouterFactory, RunningRouter
from warmstart.api.routers import RouterConfig
from warmstart.router import admin

FIRST = b"a" * 3000
REST = b"b" * (256 * 1024)
KIB = 1024
MIB = 1024 * KIB


@dataclass
class SlowReplica:
    url: str
    release: asyncio.Event


@pytest.fixture
async def slow_replica() -> AsyncIterator[SlowReplica]:
    """A replica whose reply to /v1/completions is FIRST, then (after ``release``) REST, chunked."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(FIRST)
        await release.wait()
        await response.write(REST)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", slow)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        yield SlowReplica(f"http://127.0.0.1:{port}", release)
    finally:
        release.set()
        await runner.cleanup()


def post(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (extra, len(body), body)
    )


SLOW_REQUEST = post(b'{"prompt": "x"}')


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    status_line, *lines = head[:-4].split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    return int(status_line.split(b" ")[1]), {name.lower(): value for name, value in fields.items()}


async def next_chunk(reader: asyncio.StreamReader) -> bytes:
    """The next chunk of a chunked body (b"" for the last one, whose trailer is consumed)."""
    size = int(await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout=30), 16)
    data = await asyncio.wait_for(reader.readexactly(size + 2), timeout=30)
    assert data.endswith(b"\r\n")
    return data[:-2]


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], bytes]:
    status, headers = await read_head(reader)
    if headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while chunk := await next_chunk(reader):
            body += chunk
        return status, headers, body
    body = await asyncio.wait_for(reader.readexactly(int(headers[b"content-length"])), timeout=30)
    return status, headers, body


def refusals(router: RunningRouter) -> float:
    labels = {"strategy": router.router.policy.strategy.value, "replica": "", "outcome": "bad_request"}
    return router.router.metrics.registry.get_sample_value("warmstart_router_requests_total", labels) or 0.0


async def until_refused(router: RunningRouter, reader: asyncio.StreamReader) -> None:
    """Until the router has counted its refusal or ended the connection."""
    for _ in range(3000):
        if refusals(router) or reader.at_eof():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the router never refused the second request")


async def open_streaming(router: RunningRouter) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose first request's reply has begun: its head and FIRST are read."""
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(SLOW_REQUEST)
    status, headers = await read_head(reader)
    assert status == 200 and headers[b"transfer-encoding"] == b"chunked"
    got = b""
    while len(got) < len(FIRST):
        got += await next_chunk(reader)
    assert got == FIRST
    return reader, writer


async def finish_streaming(reader: asyncio.StreamReader) -> None:
    """The rest of the first reply arrives complete, byte for byte."""
    rest = b""
    while chunk := await next_chunk(reader):
        rest += chunk
    assert rest == REST, f"the first response was cut after {len(FIRST) + len(rest)} of {len(FIRST + REST)} bytes"


def oversized_by_length() -> bytes:
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (4 * MIB)
    )


def oversized_chunked() -> bytes:
    chunk = b"x" * (32 * KIB)
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(chunk), chunk) * 8
    )


def malformed() -> bytes:
    return b"GET /health HTTP/1.1 what\r\nHost: r\r\n\r\n"


def upgrade() -> bytes:
    return b"GET /health HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"


def head_too_large() -> bytes:
    return b"GET /health HTTP/1.1\r\nHost: r\r\n" + b"X-Pad: " + b"p" * (80 * KIB) + b"\r\n"


def body_late() -> bytes:
    return post(b"0123456789" * 10)[:-90]  # 10 of 100 body bytes, and never the rest


def over_the_budget() -> bytes:
    return post(b'{"prompt": "' + b"x" * (96 * KIB) + b'"}')


SMALL_LIMITS = RouterConfig(max_body_bytes=64 * KIB, body_timeout_seconds=0.5, read_timeout_seconds=60)
SMALL_BUDGET = RouterConfig(max_body_bytes=MIB, max_buffered_bytes=64 * KIB, read_timeout_seconds=60)

CASES: dict[str, tuple[Callable[[], bytes], int, RouterConfig]] = {
    "413 content-length": (oversized_by_length, 413, SMALL_LIMITS),
    "413 chunked body": (oversized_chunked, 413, SMALL_LIMITS),
    "400 malformed request line": (malformed, 400, SMALL_LIMITS),
    "400 protocol upgrade": (upgrade, 400, SMALL_LIMITS),
    "431 head too large": (head_too_large, 431, SMALL_LIMITS),
    "408 body late": (body_late, 408, SMALL_LIMITS),
    "503 byte budget": (over_the_budget, 503, SMALL_BUDGET),
}


@pytest.mark.parametrize("kind", list(CASES))
async def test_a_refused_request_waits_for_the_streaming_response_before_it(
    kind: str, slow_replica: SlowReplica, routers: RouterFactory
) -> None:
    second, status, config = CASES[kind]
    router = await routers(config, [slow_replica.url])
    reader, writer = await open_streaming(router)
    writer.write(second())
    await until_refused(router, reader)
    slow_replica.release.set()
    await finish_streaming(reader)
    refused, headers, body = await read_response(reader)
    assert refused == status
    assert json.loads(body)["error"]["code"] == status
    assert headers[b"connection"] == b"close"
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""  # then the router closes
    writer.close()
    assert router.router.status()["inflight"] == 0
    assert router.runner.budget.held == 0


async def test_requests_after_a_refused_one_are_never_answered(
    slow_replica: SlowReplica, routers: RouterFactory
) -> None:
    """A request pipelined behind a refused one does not jump ahead of the refusal, nor follow it."""
    router = await routers(SMALL_LIMITS, [slow_replica.url])
    reader, writer = await open_streaming(router)
    writer.write(oversized_by_length() + b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
    await until_refused(router, reader)
    slow_replica.release.set()
    await finish_streaming(reader)
    status, _, _ = await read_response(reader)
    assert status == 413
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    writer.close()


async def test_requests_before_a_refused_one_are_answered_first_in_order(
    slow_replica: SlowReplica, routers: RouterFactory
) -> None:
    router = await routers(SMALL_LIMITS, [slow_replica.url])
    reader, writer = await open_streaming(router)
    writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\nGET /ready HTTP/1.1\r\nHost: r\r\n\r\n" + malformed())
    await until_refused(router, reader)
    slow_replica.release.set()
    await finish_streaming(reader)
    health = await read_response(reader)
    assert health[0] == 200 and health[2] == b'{"status": "ok"}'
    ready = await read_response(reader)
    assert ready[0] == 200 and json.loads(ready[2])["replicas"] == 1
    status, _, _ = await read_response(reader)
    assert status == 400
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    writer.close()


async def test_a_refused_first_request_ends_the_connection_before_anything_pipelined_after_it(
    slow_replica: SlowReplica, routers: RouterFactory
) -> None:
    router = await routers(SMALL_LIMITS, [slow_replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(oversized_by_length() + SLOW_REQUEST + b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
    status, headers, _ = await read_response(reader)
    assert status == 413 and headers[b"connection"] == b"close"
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    writer.close()
    assert router.router.status()["inflight"] == 0


async def test_a_protocol_upgrade_alone_is_a_400(routers: RouterFactory) -> None:
    router = await routers(SMALL_LIMITS, [])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(upgrade())
    status, headers, _ = await read_response(reader)
    assert status == 400 and headers[b"connection"] == b"close"
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    writer.close()


async def test_an_interim_100_continue_waits_for_the_streaming_response_before_it(
    slow_replica: SlowReplica, routers: RouterFactory
) -> None:
    """``Expect: 100-continue`` on a pipelined request is not written before or into the reply ahead of it."""
    router = await routers(SMALL_LIMITS, [slow_replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b'{"prompt": "second"}'
    writer.write(SLOW_REQUEST + post(body, b"Expect: 100-continue\r\n")[: -len(body)])
    status, headers = await read_head(reader)
    assert status == 200 and headers[b"transfer-encoding"] == b"chunked"
    got = b""
    while len(got) < len(FIRST):  # the router has read both heads by now: they came in one write
        got += await next_chunk(reader)
    slow_replica.release.set()
    await finish_streaming(reader)
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    status, _, reply = await read_response(reader)
    assert status == 200 and reply == FIRST + REST
    writer.close()
