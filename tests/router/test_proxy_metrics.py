"""The seeds' metrics at the router: TTFT per replica, requests by the replica's node placement."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import admin


async def quick(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def test_ttft_is_recorded_per_replica(routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", quick)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{port}"
        router = await routers(RouterConfig(), [url])
        for _ in range(3):
            async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
                assert response.status == 200
        text = await (await client.get(router.admin_url + "/metrics")).text()
        assert f'warmstart_router_ttft_seconds_count{{replica="{url}"}} 3.0' in text
        assert "warmstart_router_queue_depth 0.0" in text
    finally:
        await runner.cleanup()


async def test_requests_are_counted_by_the_placement_of_their_replica(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    runners, urls = [], []
    for _ in range(3):
        app = web.Application()
        app.router.add_post("/v1/completions", quick)
        runner, port = await admin.serve(app, "127.0.0.1", 0)
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        router = await routers(RouterConfig(strategy="roundrobin", warm_nodes=("node-warm",)))
        # as discovery reports them: two replicas with their nodes, one whose node is not known
        router.router.set_backends(urls, {urls[0]: "node-warm", urls[1]: "node-cold"})
        for _ in range(6):
            async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
                assert response.status == 200
        text = await (await client.get(router.admin_url + "/metrics")).text()
        for placement in ("warm", "cold", "unknown"):
            assert f'warmstart_router_placement_requests_total{{placement="{placement}"}} 2.0' in text
    finally:
        for runner in runners:
            await runner.cleanup()
