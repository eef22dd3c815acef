"""Router replicas' sync, process against process: forged, malformed, replayed, oversized and flooding messages sent
to a router's sync port are dropped and counted; a peer's claims are bounded; a killed peer's in-flight requests stop
counting while the survivor keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import zmq
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from routerprocess import RouterProcess, free_port, router_process
from warmstart.router import peerwire
from warmstart.router.peerwire import Message, Pick

KEY = os.urandom(32).hex().encode()
CAP = 8


async def _status(session: aiohttp.ClientSession, router: RouterProcess) -> dict[str, Any]:
    async with session.get(f"http://127.0.0.1:{router.admin_port}/router/status") as response:
        value: dict[str, Any] = await response.json()
        return value


async def _dropped(session: aiohttp.ClientSession, router: RouterProcess) -> dict[str, float]:
    async with session.get(f"http://127.0.0.1:{router.admin_port}/metrics") as response:
        text = await response.text()
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "warmstart_router_peer_messages_dropped_total"
    }


async def _until(probe: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll ``probe`` (async) until it returns something true; the timeout only bounds a broken run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


@contextlib.asynccontextmanager
async def _hanging_backend() -> AsyncIterator[str]:
    """A replica that answers /health and holds every completion until the test ends."""
    release = asyncio.Event()

    async def completions(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"choices": [{"text": "ok"}]})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        release.set()
        await runner.cleanup()


def _sync_flags(tmp_path: Path, port: int, peers: list[int]) -> list[str]:
    (tmp_path / "key").write_bytes(KEY)
    listing = tmp_path / f"peers-{port}"
    listing.write_text("".join(f"tcp://127.0.0.1:{p}\n" for p in peers))
    return ["--sync-port", str(port), "--sync-key-file", str(tmp_path / "key"), "--peers-file", str(listing)]


def _config(tmp_path: Path) -> list[str]:
    path = tmp_path / "router.yaml"
    path.write_text(f"strategy: prefixaware\nmaxConcurrentRequests: {CAP}\n")
    return ["--config", str(path)]


async def test_forged_malformed_replayed_and_flooding_messages_are_dropped_and_counted(tmp_path: Path) -> None:
    backend = "http://127.0.0.1:9"
    port = free_port()
    flags = [*_sync_flags(tmp_path, port, [port]), *_config(tmp_path)]
    async with router_process([backend], *flags) as router, aiohttp.ClientSession() as session:
        context = zmq.Context.instance()
        push = context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(f"tcp://127.0.0.1:{port}")
        try:
            now = int(time.time() * 1000)
            honest = Message(b"p" * 8, 1, now, {backend: 3}, (Pick(backend, (1, 2, 3)),))
            forged = peerwire.encode(Message(b"x" * 8, 1, now, {backend: 5}), b"not the key at all, guessed")
            push.send_multipart(forged)  # another key
            push.send_multipart([peerwire.encode(honest, KEY)[0]])  # no MAC at all
            push.send_multipart([b"\x93garbage", peerwire.mac(KEY, b"\x93garbage")])  # authentic but not a message
            push.send_multipart(peerwire.encode(honest, KEY))  # accepted
            push.send_multipart(peerwire.encode(honest, KEY))  # the same again: a replay
            stale = Message(b"q" * 8, 1, now - 3_600_000, {backend: 4})
            push.send_multipart(peerwire.encode(stale, KEY))
            claims = Message(b"p" * 8, 2, now, {backend: 1_000_000})
            push.send_multipart(peerwire.encode(claims, KEY))
            dropped = await _until(
                lambda: _wanted(session, router, {"forged": 1, "malformed": 2, "replayed": 1, "stale": 1}),
                "the bad messages counted",
            )
            assert dropped.get("flood", 0) == 0
            # a million requests claimed, clipped to what one router may hold (said again: a silent peer stops counting)
            push.send_multipart(peerwire.encode(Message(b"p" * 8, 3, int(time.time() * 1000), {backend: 10**6}), KEY))
            status = await _until(lambda: _claimed(session, router), "the claim, clipped")
            assert [peer["sender"] for peer in status["peerSync"]["peers"]] == [(b"p" * 8).hex()]  # the honest one
            assert status["peerSync"]["clippedClaims"] >= 1

            # a flood from one sender: beyond its rate, dropped and counted, and the router still serves
            for seq in range(4, 4 + 4000):
                push.send_multipart(peerwire.encode(Message(b"p" * 8, seq, now, {backend: 1}), KEY))
            await _until(lambda: _flooded(session, router), "the flood counted")
            assert (await _status(session, router))["peerSync"]["peers"][0]["inflight"] <= CAP
        finally:
            push.close()


async def _wanted(session: aiohttp.ClientSession, router: RouterProcess, wanted: dict[str, int]) -> dict[str, float]:
    dropped = await _dropped(session, router)
    return dropped if all(dropped.get(reason, 0) >= count for reason, count in wanted.items()) else {}


async def _claimed(session: aiohttp.ClientSession, router: RouterProcess) -> dict[str, Any] | None:
    status = await _status(session, router)
    return status if [peer["inflight"] for peer in status["peerSync"]["peers"]] == [CAP] else None


async def _flooded(session: aiohttp.ClientSession, router: RouterProcess) -> bool:
    return (await _dropped(session, router)).get("flood", 0) > 0


async def test_a_killed_peers_requests_stop_counting_and_the_survivor_serves(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    async with _hanging_backend() as backend:
        flags_a = [*_sync_flags(tmp_path, ports[0], ports), *_config(tmp_path), "--sync-heartbeat", "0.2"]
        flags_b = [*_sync_flags(tmp_path, ports[1], ports), *_config(tmp_path), "--sync-heartbeat", "0.2"]
        async with (
            router_process([backend], *flags_a) as a,
            router_process([backend], *flags_b) as b,
            aiohttp.ClientSession() as session,
        ):
            held = [
                asyncio.create_task(session.post(f"{a.url}/v1/completions", json={"prompt": f"hold {i}"}))
                for i in range(3)
            ]
            await _until(lambda: _peer_inflight(session, b, 3), "B counts A's three requests")
            a.process.send_signal(signal.SIGKILL)
            await _until(lambda: _peer_inflight(session, b, 0), "B drops the dead peer's requests")
            for task in held:  # the dead router's own requests fail with it, and only those
                with contextlib.suppress(aiohttp.ClientError):
                    await task
            status = await _status(session, b)
            assert status["inflight"] == 0
            assert [peer["inflight"] for peer in status["peerSync"]["peers"]] == [0]


async def _peer_inflight(session: aiohttp.ClientSession, router: RouterProcess, count: int) -> bool:
    status = await _status(session, router)
    peers = status["peerSync"]["peers"]
    return bool(peers) and sum(peer["inflight"] for peer in peers) == count
