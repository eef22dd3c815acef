"""Two routers follow the same simulated vLLM replicas' KV events and agree, end to end over real sockets.

Real: the sim replicas (HTTP and their ZMQ publishers in vLLM's wire format), the routers' traffic
servers and admin apps, their ZMQ subscriptions and metrics scrapes, a real tokenizer. Not used:
Kubernetes (the fleet is given as backends).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import zmq

from eppharness import Stream, pick_of, request_body, request_headers
from warmstart.api.routers import RouterConfig
from warmstart.router import admin, extproc, proxying
from warmstart.router.routing import Router
from warmstart.router.tokenizing import ModelTokenizer
from warmstart.sim import tinytokenizer
from warmstart.sim.engine import EngineParams
from warmstart.sim.kvpublishing import KVEventsConfig, Publisher
from warmstart.sim.server import SimReplica
from warmstart.sim.server import serve as serve_replica
from warmstart.sim.workloads import words

FAST = EngineParams(time_scale=0.002, cache_tokens=64 * 16)
EVENTS, REPLAY = 1, 2  # the publisher's ports, relative to each replica's HTTP port


def _port_triple() -> int:
    """An HTTP port whose next two ports are free too."""
    for _ in range(100):
        socks = [socket.socket() for _ in range(3)]
        try:
            socks[0].bind(("127.0.0.1", 0))
            port = int(socks[0].getsockname()[1])
            socks[1].bind(("127.0.0.1", port + EVENTS))
            socks[2].bind(("127.0.0.1", port + REPLAY))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free ports")


async def _replica(name: str, tokenizer: ModelTokenizer, events: bool) -> tuple[SimReplica, str, Any]:
    """A replica on a free port triple; another worker may take a port between the probe and the bind: try again."""
    for _ in range(20):
        port = _port_triple()
        publisher = None
        try:
            if events:
                config = KVEventsConfig(True, "zmq", f"tcp://*:{port + EVENTS}", f"tcp://*:{port + REPLAY}")
                publisher = Publisher(config)
                publisher.start()
            replica = SimReplica(name, FAST, tokenizer=tokenizer, publisher=publisher)
            runner, _ = await serve_replica(replica, "127.0.0.1", port)
            return replica, f"http://127.0.0.1:{port}", runner
        except (OSError, zmq.ZMQError):
            if publisher is not None:
                await publisher.close()
    raise RuntimeError("no free port triple after 20 tries")


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[tuple[Path, list[tuple[SimReplica, str]]]]:
    tokenizer_dir = tinytokenizer.build(tmp_path / "tokenizer")
    tokenizer = ModelTokenizer.from_dir(tokenizer_dir)
    started = []
    for i in range(3):
        started.append(await _replica(f"r{i}", tokenizer, events=i < 2))  # the third publishes nothing
    yield tokenizer_dir, [(replica, url) for replica, url, _ in started]
    for replica, _, runner in started:
        await runner.cleanup()
        if replica.publisher is not None:
            await replica.publisher.close()


async def _router(config: RouterConfig, backends: list[str]) -> tuple[Router, str, Any, Any, str]:
    router = Router(config, backends)
    router.start()
    traffic = await proxying.serve(router, "127.0.0.1", 0)
    admin_runner, admin_port = await admin.serve(admin.make_admin_app(router), "127.0.0.1", 0)
    return router, f"http://127.0.0.1:{traffic.port}", traffic, admin_runner, f"http://127.0.0.1:{admin_port}"


async def _eventually(check: Any, timeout_steps: int = 100) -> None:
    for _ in range(timeout_steps):
        if check():
            return
        await asyncio.sleep(0.05)
    assert check()


def _events_config(tokenizer_dir: Path, **knobs: Any) -> RouterConfig:
    """A prefixaware router that follows the fleet's KV events (ports relative to each replica's)."""
    return RouterConfig(
        strategy="prefixaware",
        kv_events=True,
        kv_events_port=EVENTS,
        kv_events_replay_port=REPLAY,
        kv_events_ports_relative=True,
        tokenizer_dir=str(tokenizer_dir),
        **knobs,
    )


async def test_two_routers_hold_the_engines_caches_and_agree(
    fleet: tuple[Path, list[tuple[SimReplica, str]]],
) -> None:
    tokenizer_dir, replicas = fleet
    urls = [url for _, url in replicas]
    config = _events_config(tokenizer_dir, engine_load_interval_seconds=0.05)
    a = await _router(config, urls)
    b = await _router(config, urls)
    rng = random.Random(3)
    systems = [words(rng, 100) for _ in range(6)]
    try:
        await asyncio.sleep(0.3)  # subscriptions reach the publishers
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            # router a routes everything; router b routes nothing and must still know where each prefix is
            served_by: dict[str, str] = {}
            for _round in range(3):
                for system in systems:
                    body = {
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": words(rng, 20)},
                        ],
                        "max_tokens": 2,
                    }
                    async with session.post(a[1] + "/v1/chat/completions", json=body) as response:
                        assert response.status == 200, await response.text()
                        served_by[system] = response.headers["x-sim-replica"]
            publishing = [(replica, url) for replica, url in replicas if replica.publisher is not None]

            def converged() -> bool:
                return all(
                    router.engines.index.engine_hashes(url) == replica.engine.cache.blocks()
                    for router in (a[0], b[0])
                    for replica, url in publishing
                )

            await _eventually(converged)
            for _, url in publishing:
                assert a[0].engines.index.keys(url) == b[0].engines.index.keys(url)
            assert sum(len(replica.engine.cache) for replica, _ in publishing) > 0
            # router b sends a known conversation where the engines hold it, although it never routed it:
            # every system whose last turn a publishing engine served is a hit through b
            published = {replica.name for replica, _ in publishing}
            expected = [system for system in systems if served_by[system] in published]
            assert len(expected) >= 2, served_by  # a placed most systems on the two publishing engines
            missed = []
            for system in expected:
                body = {
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": "abc"}],
                    "max_tokens": 1,
                }
                async with session.post(b[1] + "/v1/chat/completions", json=body) as response:
                    assert response.status == 200
                    usage = (await response.json())["usage"]
                    if usage["prompt_tokens_details"]["cached_tokens"] < 96:
                        missed.append((served_by[system], response.headers["x-sim-replica"]))
            assert missed == []
            async with session.get(b[4] + "/router/status") as response:
                status = await response.json()
            engines = status["engines"]
            assert engines["tokenizer"] == "loaded"
            live = {url: r["events"]["live"] for url, r in engines["replicas"].items()}
            assert live == {urls[0]: True, urls[1]: True, urls[2]: False}
            assert all(r["engineLoad"] is not None for r in engines["replicas"].values())
            async with session.get(b[4] + "/metrics") as response:
                metrics = await response.text()
            assert 'warmstart_router_kv_routed_total{source="events"}' in metrics
            assert "warmstart_router_kv_event_lag_seconds_count" in metrics
    finally:
        for router, _, traffic, admin_runner, _ in (a, b):
            await traffic.cleanup()
            await admin_runner.cleanup()
            await router.stop()


async def test_an_untokenizable_request_is_routed_by_text_never_failed(
    fleet: tuple[Path, list[tuple[SimReplica, str]]],
) -> None:
    tokenizer_dir, replicas = fleet
    config = _events_config(tokenizer_dir)
    router, url, traffic, admin_runner, admin_url = await _router(config, [u for _, u in replicas])
    try:
        body = {
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}],
            "max_tokens": 1,
        }
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
            async with session.get(admin_url + "/metrics") as response:
                assert "warmstart_router_kv_untokenized_total 1.0" in await response.text()
    finally:
        await traffic.cleanup()
        await admin_runner.cleanup()
        await router.stop()


async def test_the_endpoint_picker_follows_the_same_engine_events(
    fleet: tuple[Path, list[tuple[SimReplica, str]]],
) -> None:
    """A picker (``--mode epp``) that routed nothing picks where the engines hold each conversation."""
    tokenizer_dir, replicas = fleet
    urls = [url for _, url in replicas]
    config = _events_config(tokenizer_dir, engine_load_interval_seconds=0.05, retries=0)
    proxy = await _router(config, urls)
    picker_router = Router(config, urls)
    picker_router.start()
    picker = await extproc.serve(picker_router, "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{picker.port}")
    rng = random.Random(5)
    systems = [words(rng, 100) for _ in range(6)]
    url_of = {replica.name: url for replica, url in replicas}
    try:
        await asyncio.sleep(0.3)  # subscriptions reach the publishers
        served_by: dict[str, str] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            for _round in range(2):
                for system in systems:
                    body = {
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": words(rng, 20)},
                        ],
                        "max_tokens": 2,
                    }
                    async with session.post(proxy[1] + "/v1/chat/completions", json=body) as response:
                        assert response.status == 200, await response.text()
                        served_by[system] = url_of[response.headers["x-sim-replica"]]
        publishing = [(replica, url) for replica, url in replicas if replica.publisher is not None]
        await _eventually(
            lambda: all(
                picker_router.engines.index.engine_hashes(url) == replica.engine.cache.blocks()
                for replica, url in publishing
            )
        )
        expected = [system for system in systems if served_by[system] in {url for _, url in publishing}]
        assert len(expected) >= 2, served_by
        for system in expected:
            body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "abc"}]}
            stream = Stream(channel)
            await stream.send(request_headers(), request_body(json.dumps(body).encode()))
            header, _ = pick_of(await stream.read())
            assert header == served_by[system].removeprefix("http://")
            stream.cancel()
        registry = picker_router.metrics.registry
        assert (registry.get_sample_value("warmstart_router_kv_routed_total", {"source": "events"}) or 0) >= len(
            expected
        )
    finally:
        await channel.close()
        await picker.stop(0)
        await picker_router.stop()
        await proxy[2].cleanup()
        await proxy[3].cleanup()
        await proxy[0].stop()
