"""Streaming and plain responses through the router, with every strategy."""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory, SimFactory
from routerhelpers import sse_events
from warmstart.api.routers import RouterConfig
from warmstart.router import admin

PROMPT = "You are a careful assistant. " * 40  # ~1,160 chars: several 256-char blocks


async def test_sse_is_relayed_chunk_by_chunk(routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    """The first event reaches the client while the backend still holds the rest back."""
    release = asyncio.Event()

    async def backend(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"n": 1}\n\n')
        await release.wait()
        await response.write(b'data: {"n": 2}\n\ndata: [DONE]\n\n')
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", backend)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        router = await routers(RouterConfig(), [f"http://127.0.0.1:{port}"])
        async with client.post(router.url + "/v1/completions", json={"prompt": "x", "stream": True}) as response:
            assert response.status == 200
            assert response.content_type == "text/event-stream"
            first = await response.content.readuntil(b"\n\n")
            assert first == b'data: {"n": 1}\n\n'
            assert router.router.status()["inflight"] == 1
            release.set()
            rest = await response.content.read()
        assert sse_events(rest) == ['{"n": 2}', "[DONE]"]
        assert router.router.status()["inflight"] == 0
    finally:
        await runner.cleanup()


async def test_streamed_chat_matches_the_replicas_output(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(strategy="prefixaware"), [replica.url])
    body = {
        "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": "hi"}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with client.post(router.url + "/v1/chat/completions", json=body) as response:
        assert response.status == 200
        events = sse_events(await response.read())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 12
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    assert len(chunks) == 13  # 12 one-token chunks and the usage chunk


async def test_every_strategy_serves_through_the_proxy(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    replicas = await sims(3)
    urls = [r.url for r in replicas]
    for strategy in (
        "random",
        "roundrobin",
        "leastoutstanding",
        "least_outstanding_requests",
        "session",
        "prefixaware",
        "prefix_aware",
        "kvaware",
    ):
        router = await routers(RouterConfig(strategy=strategy), urls)
        for i in range(6):
            body = {"prompt": PROMPT + str(i), "max_tokens": 3, "user": f"u{i % 2}"}
            async with client.post(router.url + "/v1/completions", json=body) as response:
                assert response.status == 200, strategy
                payload = await response.json()
                assert payload["usage"]["completion_tokens"] == 3
        status = router.router.status()
        assert status["inflight"] == 0
        assert sum(b["served"] for b in status["backends"]) == 6


async def test_prefixaware_sends_a_shared_prefix_to_one_replica(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    replicas = await sims(4)
    router = await routers(RouterConfig(strategy="prefixaware"), [r.url for r in replicas])
    served, cached = set(), []
    # five in a row fit the request-share bound (1.2 x 6 / 4 + 3 = 4.8 > 4); an eighth would spill
    for i in range(5):
        body = {"prompt": PROMPT + f" question {i}", "max_tokens": 2}
        async with client.post(router.url + "/v1/completions", json=body) as response:
            payload = await response.json()
            served.add(response.headers["x-sim-replica"])
            cached.append(payload["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert len(served) == 1
    assert cached[0] == 0 and all(c > 200 for c in cached[1:])


async def test_session_header_pins_a_session(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    replicas = await sims(4)
    router = await routers(RouterConfig(strategy="session"), [r.url for r in replicas])
    for session in ("alice", "bob", "carol"):
        served = set()
        for i in range(4):
            async with client.post(
                router.url + "/v1/completions",
                json={"prompt": f"p{i}", "max_tokens": 1},
                headers={"x-session-id": session},
            ) as response:
                served.add(response.headers["x-sim-replica"])
        assert len(served) == 1


async def test_models_health_on_traffic_port_status_and_metrics_on_admin_port_only(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(strategy="prefixaware"), [replica.url])
    async with client.get(router.url + "/v1/models") as response:
        assert (await response.json())["data"][0]["id"] == "sim-llm"
    async with client.get(router.url + "/health") as response:
        assert response.status == 200
    for internal in ("/router/status", "/metrics"):
        async with client.get(router.url + internal) as response:
            assert response.status == 404  # the traffic port does not expose the router's internals
    async with client.get(router.admin_url + "/router/status") as response:
        status = await response.json()
    assert status["strategy"] == "prefixaware"
    assert status["backends"] == [{"url": replica.url, "inflight": 0, "served": 0}]
    async with client.post(router.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}):
        pass
    async with client.get(router.admin_url + "/metrics") as response:
        text = await response.text()
    assert f'warmstart_router_requests_total{{outcome="ok",replica="{replica.url}",strategy="prefixaware"}} 1.0' in text
    assert "warmstart_router_decision_seconds_count 1.0" in text
    assert 'warmstart_router_prefix_tokens_total{kind="prompt"}' in text
    assert PROMPT[:20] not in text
