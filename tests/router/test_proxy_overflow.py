"""The concurrency cap is hard: beyond it requests queue (FIFO, bounded), then overflow with Retry-After."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory, RunningRouter
from warmstart.api.routers import RouterConfig
from warmstart.router import admin


async def eventually(predicate: object, what: str) -> None:
    for _ in range(500):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def metric(router: RunningRouter, name: str) -> float:
    return sum(
        sample.value
        for family in router.router.metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    )


async def test_cap_queue_overflow_and_cancel(routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    release = asyncio.Event()
    running, peak, served = 0, 0, []

    async def slow(request: web.Request) -> web.Response:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        body = await request.json()
        await release.wait()
        running -= 1
        served.append(body["prompt"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/completions", slow)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        config = RouterConfig(max_concurrent_requests=1, max_queue_size=2, overflow_status_code=503)
        router = await routers(config, [f"http://127.0.0.1:{port}"])

        async def send(prompt: str) -> tuple[int, str | None]:
            async with client.post(router.url + "/v1/completions", json={"prompt": prompt}) as response:
                await response.read()
                return response.status, response.headers.get("Retry-After")

        first = asyncio.create_task(send("a"))
        await eventually(lambda: running == 1, "the first request at the replica")
        second = asyncio.create_task(send("b"))
        doomed = asyncio.create_task(send("c"))
        await eventually(lambda: router.router.admission.depth == 2, "two queued")
        third = asyncio.create_task(send("d"))
        await eventually(lambda: metric(router, "warmstart_router_overflows_total") == 1, "an overflow")
        assert await third == (503, "1")  # the configured overflowStatusCode, with Retry-After

        doomed.cancel()  # the client gives up while queued
        await asyncio.gather(doomed, return_exceptions=True)
        await eventually(lambda: router.router.admission.depth == 1, "the cancelled request to leave the queue")
        assert metric(router, "warmstart_router_queue_depth") == 1

        release.set()
        assert (await first)[0] == 200 and (await second)[0] == 200
        assert served == ["a", "b"]  # FIFO, and the cancelled one never reached the replica
        assert peak == 1  # never more than the cap at the replica
        assert router.router.status()["inflight"] == 0 and router.router.admission.depth == 0
    finally:
        release.set()
        await runner.cleanup()
