"""Bodies of millions of empty messages neither stall the router's event loop nor grow its memory without bound.

A real ``warmstart router`` process (so its event loop and memory are its own), a trivial
backend in the test process that reads and discards bodies, four concurrent ~8 MiB bodies of
millions of ``{}`` messages, and ``/health`` polled the whole time. Asserted: every health
check answers within a generous second, many of them answer while the bodies are handled, and
the router's resident memory (its own and its parser worker's) stays bounded.
"""

from __future__ import annotations

import asyncio
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import aiohttp
import psutil
import pytest
from aiohttp import web

from warmstart.router import admin

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss(process: psutil.Process) -> tuple[int, int]:
    """(the router's own RSS, its worker processes' RSS)."""
    children = 0
    for child in process.children(recursive=True):
        try:
            children += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return process.memory_info().rss, children


@pytest.fixture
async def sink() -> AsyncIterator[str]:
    """A backend that reads each body and answers a tiny JSON reply."""

    async def handle(request: web.Request) -> web.Response:
        size = len(await request.read())
        return web.json_response({"bytes": size})

    app = web.Application(client_max_size=64 * MIB)
    app.router.add_post("/v1/chat/completions", handle)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_millions_of_empty_messages_keep_health_answering_and_memory_bounded(
    sink: str, tmp_path: pathlib.Path
) -> None:
    port, admin = free_port(), free_port()
    args = ["router", "--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin), "--backends", sink]
    config = tmp_path / "router.yaml"  # one client sends all four bodies: its share must hold them
    config.write_text(f"strategy: prefixaware\nmaxBufferedBytesPerClient: {64 * MIB}\n")
    proc = subprocess.Popen([sys.executable, "-m", "warmstart.cli", *args, "--config", str(config)])
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                try:
                    async with session.get(url + "/ready") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            process = psutil.Process(proc.pid)
            before_own, before_workers = rss(process)
            count = (8 * MIB - 64) // 3
            body = b'{"model":"m","messages":[' + b",".join([b"{}"] * count) + b"]}"
            assert len(body) <= 8 * MIB

            async def post() -> int:
                async with session.post(
                    url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
                ) as response:
                    await response.read()
                    return response.status

            posts = asyncio.gather(*(post() for _ in range(4)))
            answered, late, peak_own, peak_workers = 0, 0, before_own, before_workers
            while not posts.done():
                try:
                    async with session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=1.0)) as response:
                        answered += response.status == 200
                except TimeoutError:
                    late += 1
                own, workers = rss(process)
                peak_own, peak_workers = max(peak_own, own), max(peak_workers, workers)
                await asyncio.sleep(0.02)
            statuses = await posts
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"health answered {answered}, late {late}; router RSS +{(peak_own - before_own) / MIB:.0f} MiB, "
        f"parser worker peak {peak_workers / MIB:.0f} MiB"
    )
    assert statuses == [200, 200, 200, 200]
    assert late == 0  # no health check waited a second
    assert answered >= 20
    assert peak_own - before_own < 160 * MIB  # the four bodies (32 MiB) and their copies, not their parse trees
    assert peak_workers < 512 * MIB  # one body parsed at a time
