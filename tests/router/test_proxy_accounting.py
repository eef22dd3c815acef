"""In-flight counters stay exact under client aborts, backend crashes and refused connections."""

from __future__ import annotations

import asyncio
import random

import aiohttp
from aiohttp import web

from proxyharness import RouterFactory, RunningRouter, SimFactory
from routerhelpers import sse_events
from warmstart.api.routers import RouterConfig
from warmstart.router import admin
from warmstart.sim.engine import EngineParams

PROMPT = "shared system prompt for accounting tests. " * 30


def counted(router: RunningRouter, outcome: str | None = None) -> float:
    """Requests the router has accounted (optionally of one outcome)."""
    return sum(
        sample.value
        for metric in router.router.metrics.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and outcome in (None, sample.labels["outcome"])
    )


async def settle(router: RunningRouter) -> None:
    """Wait (bounded) until nothing is in flight and the request count stops moving."""
    last, stable = -1.0, 0
    for _ in range(500):
        now = counted(router)
        stable = stable + 1 if now == last and router.router.status()["inflight"] == 0 else 0
        if stable >= 5:
            return
        last = now
        await asyncio.sleep(0.02)


async def test_a_thousand_requests_with_random_aborts_leave_every_counter_at_zero(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    replicas = await sims(4, EngineParams(time_scale=0.001, max_running=8))
    router = await routers(RouterConfig(strategy="prefixaware", max_concurrent_requests=6), [r.url for r in replicas])
    rng = random.Random(7)
    semaphore = asyncio.Semaphore(40)
    outcomes: dict[str, int] = {}

    async def one(i: int) -> None:
        mode = rng.choice(["complete", "stream", "abort_headers", "abort_chunks", "abort_early"])
        body = {"prompt": PROMPT + f"#{i % 37}", "max_tokens": 30, "stream": mode != "complete"}
        async with semaphore:
            try:
                if mode == "abort_early":  # give up before the response arrives
                    await asyncio.wait_for(client.post(router.url + "/v1/completions", json=body), 0.0005)
                async with client.post(router.url + "/v1/completions", json=body) as response:
                    if mode == "abort_headers":
                        response.close()
                    elif mode == "abort_chunks":
                        await response.content.readuntil(b"\n\n")
                        response.close()
                    else:
                        await response.read()
                        assert response.status == 200
            except (TimeoutError, aiohttp.ClientError):
                pass
        outcomes[mode] = outcomes.get(mode, 0) + 1

    await asyncio.gather(*(one(i) for i in range(1000)))
    assert sum(outcomes.values()) == 1000 and len(outcomes) == 5
    await settle(router)
    # every request that reached the router was accounted exactly once, aborted ones included
    assert 1000 - outcomes["abort_early"] <= counted(router) <= 1000
    assert counted(router, "aborted") > 0 and counted(router, "ok") > 0
    assert all(b["inflight"] == 0 for b in router.router.status()["backends"])
    assert all(r.prefill_chars == 0 for r in router.router.fleet.replicas())  # prefill backlog is exact too
    for metric in router.router.metrics.inflight.collect():
        assert all(sample.value == 0 for sample in metric.samples)
    for _ in range(200):  # the replicas also release their slots once the router hangs up
        if all(r.replica.engine.running == 0 and r.replica.engine.waiting == 0 for r in replicas):
            break
        await asyncio.sleep(0.02)
    assert all(r.replica.engine.running == 0 for r in replicas)


async def test_backend_killed_mid_stream_ends_with_an_error_event(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1, EngineParams(time_scale=1.0, decode_tokens_per_s=20))  # slow: we kill it mid-way
    router = await routers(RouterConfig(strategy="prefixaware"), [replica.url])
    body = {"prompt": PROMPT, "max_tokens": 400, "stream": True}
    async with client.post(router.url + "/v1/completions", json=body) as response:
        first = await response.content.readuntil(b"\n\n")
        assert first.startswith(b"data: {")
        assert router.router.status()["inflight"] == 1
        assert replica.replica.crash() == 1
        rest = await response.read()
    events = sse_events(rest)
    assert "[DONE]" not in events
    assert '"upstream_error"' in events[-1]
    await settle(router)
    assert router.router.status()["inflight"] == 0
    text = await (await client.get(router.admin_url + "/metrics")).text()
    assert f'outcome="error",replica="{replica.url}"' in text


async def test_refused_connection_is_retried_once_on_the_next_candidate(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession, refused_url: str
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(strategy="roundrobin"), [refused_url, replica.url])
    served = []
    for i in range(4):  # round robin starts on each backend twice
        async with client.post(router.url + "/v1/completions", json={"prompt": f"{i}", "max_tokens": 1}) as response:
            assert response.status == 200
            served.append(response.headers["x-sim-replica"])
    assert served == ["r0"] * 4
    status = {b["url"]: b for b in router.router.status()["backends"]}
    assert status[refused_url]["inflight"] == 0 and status[replica.url]["inflight"] == 0
    text = await (await client.get(router.admin_url + "/metrics")).text()
    assert (
        f'warmstart_router_requests_total{{outcome="refused",replica="{refused_url}",strategy="roundrobin"}} 2.0'
        in text
    )


async def test_all_candidates_refusing_gives_502_after_one_retry(
    routers: RouterFactory, client: aiohttp.ClientSession, refused_url: str
) -> None:
    other = refused_url.replace("127.0.0.1", "127.0.0.2")  # nothing listens there either
    router = await routers(RouterConfig(strategy="random"), [refused_url, other])
    async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
        assert response.status == 502
        assert (await response.json())["error"]["type"] == "upstream_error"
    assert router.router.status()["inflight"] == 0


async def test_read_timeout_mid_stream_is_an_error_event_and_counters_are_exact(
    routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    stall = asyncio.Event()

    async def backend(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"n": 1}\n\n')
        await stall.wait()  # never set: the replica goes silent
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", backend)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    try:
        router = await routers(RouterConfig(read_timeout_seconds=0.2), [f"http://127.0.0.1:{port}"])
        async with client.post(router.url + "/v1/completions", json={"prompt": "x", "stream": True}) as response:
            events = sse_events(await response.read())
        assert events[0] == '{"n": 1}'
        assert "upstream_error" in events[-1]
        assert router.router.status()["inflight"] == 0
    finally:
        await runner.cleanup()
