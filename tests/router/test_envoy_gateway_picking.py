"""warmstart's endpoint picker behind a real Envoy configured as a GIE gateway, in front of simulated replicas.

Checked from both ends: the replica that served says so itself (``x-sim-replica``, counted by its engine), and the
picker's pick list and accounting say where it sent each request. Also: streams pass through Envoy and the picker
unchanged; the gateway's subset hint is honoured; the picker's 429 and 503 reach the client with their bodies; a
prefix group stays on one replica; and with the picker down Envoy follows the failure mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from envoyprocess import address_of
from gatewayharness import gateway
from proxyharness import RunningReplica, SimFactory
from routerhelpers import sse_events
from warmstart.api.routers import RouterConfig

DOCUMENT = " ".join(f"clause {i} of the shared contract text," for i in range(120))


def _endpoint(replica: RunningReplica) -> str:
    address = address_of(replica.url)
    return f"{address.host}:{address.port}"


def _engine_counts(replicas: list[RunningReplica]) -> dict[str, int]:
    return {r.url: r.replica.engine.counters.requests for r in replicas}


def _body(prompt: str, **extra: object) -> dict[str, object]:
    return {"model": "sim-llm", "prompt": prompt, "max_tokens": 4, **extra}


async def test_every_request_lands_on_the_picked_replica(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replicas = await sims(4)
    by_name = {r.replica.name: r for r in replicas}
    async with gateway([r.url for r in replicas], tmp_path, monkeypatch) as gw:
        for i in range(24):
            prompt = f"group {i % 6}: {DOCUMENT} question {i}"
            async with client.post(gw.url + "/v1/completions", json=_body(prompt)) as response:
                assert response.status == 200, await response.text()
                served = by_name[response.headers["x-sim-replica"]]
                await response.read()
            # the picker's first choice is the replica that answered
            assert gw.picks[-1].split(",")[0] == _endpoint(served)
        assert len(gw.picks) == 24
        # the picker counted each request on the replica whose engine counted it, and holds no slot
        assert gw.served() == _engine_counts(replicas)
        assert await gw.settled_inflight() == 0


async def test_a_stream_passes_through_unchanged(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (replica,) = await sims(1, stream_chunk_tokens=1)
    body = _body("tell me a story about " + DOCUMENT, max_tokens=12, stream=True)
    async with client.post(replica.url + "/v1/completions", json=body) as response:
        direct = sse_events(await response.read())
    async with gateway([replica.url], tmp_path, monkeypatch) as gw:
        async with client.post(gw.url + "/v1/completions", json=body) as response:
            assert response.status == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            pieces = [piece async for piece in response.content.iter_any()]
        assert await gw.settled_inflight() == 0
    through = sse_events(b"".join(pieces))
    assert through[-1] == "[DONE]"
    assert len(through) == len(direct) > 12  # one event per token, then usage and [DONE]
    texts = [json.loads(e)["choices"][0]["text"] for e in through[:-1] if json.loads(e)["choices"]]
    direct_texts = [json.loads(e)["choices"][0]["text"] for e in direct[:-1] if json.loads(e)["choices"]]
    assert texts == direct_texts


@contextlib.asynccontextmanager
async def _paced_replica() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A replica that streams one SSE event, then waits for the event before it sends the rest."""
    go_on = asyncio.Event()

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-sim-replica": "paced"})
        await response.prepare(request)
        await response.write(b'data: {"id": "cmpl-paced-1", "choices": [{"text": "first"}]}\n\n')
        await go_on.wait()
        await response.write(b'data: {"id": "cmpl-paced-1", "choices": [{"text": "second"}]}\n\n')
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", go_on
    finally:
        go_on.set()
        await runner.cleanup()


async def test_a_stream_reaches_the_client_while_the_replica_is_still_generating(
    client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first event reaches the client before the replica sends the second: neither Envoy nor the picker (which
    sees every response piece) holds the stream back. Without streaming this waits forever (the guard fails it)."""
    async with _paced_replica() as (url, go_on), gateway([url], tmp_path, monkeypatch) as gw:
        body = _body("tell me a story about " + DOCUMENT, stream=True)
        async with client.post(gw.url + "/v1/completions", json=body) as response:
            assert response.status == 200
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), timeout=30)
            assert b'"first"' in first
            go_on.set()
            rest = await response.read()
        assert b'"second"' in rest and rest.endswith(b"data: [DONE]\n\n")
        assert await gw.settled_inflight() == 0


async def test_a_prefix_group_sticks_to_one_replica(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interleaved groups of prompts, each with its own long shared prefix: every group stays where it is cached.

    The request-share bound is relaxed here: by design it spreads a group that takes more than its share of a
    fleet's traffic, which a dozen requests on four replicas would do."""
    replicas = await sims(4)
    config = RouterConfig.model_validate({"strategy": "prefixaware", "balanceEpsilon": 10.0})
    async with gateway([r.url for r in replicas], tmp_path, monkeypatch, config=config) as gw:
        served: dict[int, set[str]] = {}
        for i in range(12):
            group = i % 3
            body = _body(f"assistant {group}: {DOCUMENT} question number {i}")
            async with client.post(gw.url + "/v1/completions", json=body) as response:
                assert response.status == 200
                served.setdefault(group, set()).add(response.headers["x-sim-replica"])
        assert [len(replicas_of_group) for replicas_of_group in served.values()] == [1, 1, 1]
    # the replicas' own caches agree: every request after a group's first hit its prefix
    hits = sum(r.replica.engine.counters.prefix_hits for r in replicas)
    assert hits > 0


async def test_the_subset_hint_is_honoured(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replicas = await sims(3)
    allowed = replicas[2]
    hint = [_endpoint(allowed)]
    # the client names another replica itself: the hint and the picker decide, not the client
    forged = {"x-gateway-destination-endpoint": _endpoint(replicas[0])}
    async with gateway([r.url for r in replicas], tmp_path, monkeypatch, subset_hint=hint) as gw:
        for i in range(9):
            body = _body(f"group {i}: {DOCUMENT}")
            async with client.post(gw.url + "/v1/completions", json=body, headers=forged) as response:
                assert response.status == 200
                assert response.headers["x-sim-replica"] == allowed.replica.name
        assert all(pick.split(",") == [_endpoint(allowed)] for pick in gw.picks)
    assert _engine_counts(replicas) == {replicas[0].url: 0, replicas[1].url: 0, allowed.url: 9}


@pytest.mark.parametrize("hint", [[], ["10.255.255.1:8000"]], ids=["empty", "unmatched"])
async def test_an_empty_or_unmatched_hint_gets_503_with_its_body(
    hint: list[str],
    sims: SimFactory,
    client: aiohttp.ClientSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replicas = await sims(2)
    async with gateway([r.url for r in replicas], tmp_path, monkeypatch, subset_hint=hint) as gw:
        async with client.post(gw.url + "/v1/completions", json=_body(DOCUMENT)) as response:
            assert response.status == 503
            error = (await response.json())["error"]
        assert "subset hint" in error["message"]
        assert gw.picks == []
    assert _engine_counts(replicas) == {r.url: 0 for r in replicas}


async def test_no_ready_replica_gets_503_with_its_body(
    client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with gateway([], tmp_path, monkeypatch) as gw:
        async with client.post(gw.url + "/v1/completions", json=_body(DOCUMENT)) as response:
            assert response.status == 503
            assert response.headers["retry-after"] == "1"
            error = (await response.json())["error"]
        assert error["type"] == "NoReadyEndpoint"


@contextlib.asynccontextmanager
async def _stalled_replica() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A replica that accepts a request and never answers; the event is set once a request reached it."""
    arrived = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        arrived.set()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", arrived
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_overload_gets_429_with_its_body(
    client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One replica, a cap of one request and no queue: while one request is in flight, the next gets 429."""
    config = RouterConfig.model_validate({"strategy": "prefixaware", "maxConcurrentRequests": 1, "maxQueueSize": 0})
    async with _stalled_replica() as (url, arrived), gateway([url], tmp_path, monkeypatch, config=config) as gw:
        first = asyncio.create_task(client.post(gw.url + "/v1/completions", json=_body("first " + DOCUMENT)))
        await arrived.wait()  # the first request holds the replica's only slot
        async with client.post(gw.url + "/v1/completions", json=_body("second " + DOCUMENT)) as response:
            assert response.status == 429
            assert response.headers["retry-after"] == "1"
            error = (await response.json())["error"]
        assert error["type"] == "Overloaded"
        assert "concurrency limit" in error["message"]
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first


async def test_fail_close_with_the_picker_stopped_answers_5xx(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replicas = await sims(2)
    async with gateway([r.url for r in replicas], tmp_path, monkeypatch) as gw:
        async with client.post(gw.url + "/v1/completions", json=_body(DOCUMENT)) as response:
            assert response.status == 200
        await gw.picker.stop(grace=1.0)
        async with client.post(gw.url + "/v1/completions", json=_body(DOCUMENT)) as response:
            assert response.status >= 500
    assert sum(_engine_counts(replicas).values()) == 1


async def test_fail_open_falls_back_to_the_model_service_once_the_picker_stops(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    *fleet, service = await sims(3)
    urls = [r.url for r in fleet]
    async with gateway(urls, tmp_path, monkeypatch, failure_mode="FailOpen", fallback=[service.url]) as gw:
        await gw.picker.stop(grace=1.0)
        for i in range(3):
            async with client.post(gw.url + "/v1/completions", json=_body(f"group {i}: {DOCUMENT}")) as response:
                assert response.status == 200
                assert response.headers["x-sim-replica"] == service.replica.name
    assert service.replica.engine.counters.requests == 3
    assert _engine_counts(fleet) == {r.url: 0 for r in fleet}


async def test_fail_open_picks_while_the_picker_runs(
    sims: SimFactory, client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FailOpen buffers the request body (Envoy cannot fail open from a full-duplex stream): the picker still picks,
    from the buffered body, and no request waits for a message timeout to reach the model Service."""
    *fleet, service = await sims(3)
    by_name = {r.replica.name: r for r in fleet}
    urls = [r.url for r in fleet]
    async with gateway(
        urls, tmp_path, monkeypatch, failure_mode="FailOpen", fallback=[service.url], message_timeout_s=30.0
    ) as gw:
        for i in range(4):
            async with client.post(gw.url + "/v1/completions", json=_body(f"group {i}: {DOCUMENT}")) as response:
                assert response.status == 200
                served = by_name[response.headers["x-sim-replica"]]  # never the model Service's fallback
            assert gw.picks[-1].split(",")[0] == _endpoint(served)
        assert len(gw.picks) == 4
        assert gw.served() == _engine_counts(fleet)
        assert await gw.settled_inflight() == 0
    assert service.replica.engine.counters.requests == 0
