"""Proxy test fixtures: a real router app and real simulated replicas on loopback ports.

Sets up: simulated vLLM replicas (``warmstart.sim``) and the router (its traffic server and its aiohttp admin
application), each served for real with handler cancellation, talking over real sockets; an aiohttp
client session for the test. Deliberately not faked: HTTP, streaming, disconnects, connection
refusal. Not used: Kubernetes (discovery is tested against the real control plane elsewhere).
Simulated time runs fast (``time_scale``) and no test asserts on wall-clock durations.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from proxyharness import RouterFactory, RunningReplica, RunningRouter, SimFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import admin, proxying
from warmstart.router.routing import Router
from warmstart.sim.engine import EngineParams
from warmstart.sim.server import SimReplica
from warmstart.sim.server import serve as serve_replica

FAST = EngineParams(time_scale=0.002)


@pytest.fixture
async def sims() -> AsyncIterator[SimFactory]:
    """``await sims(n, params=..., stream_chunk_tokens=...)`` -> n running replicas."""
    started: list[RunningReplica] = []

    async def start(count: int, params: EngineParams = FAST, stream_chunk_tokens: int = 1) -> list[RunningReplica]:
        batch = []
        for _ in range(count):
            replica = SimReplica(f"r{len(started)}", params, stream_chunk_tokens=stream_chunk_tokens)
            runner, port = await serve_replica(replica, "127.0.0.1", 0)
            running = RunningReplica(replica, f"http://127.0.0.1:{port}", runner)
            started.append(running)
            batch.append(running)
        return batch

    yield start
    for running in started:
        await running.runner.cleanup()


@pytest.fixture
async def routers() -> AsyncIterator[RouterFactory]:
    """``await routers(config, backends, header_timeout=...)`` -> a running router (traffic and admin ports)."""
    started: list[RunningRouter] = []

    async def start(
        config: RouterConfig | None = None, backends: list[str] | None = None, **serve_options: float
    ) -> RunningRouter:
        router = Router(config or RouterConfig(), backends or [])
        traffic = await proxying.serve(router, "127.0.0.1", 0, **serve_options)
        admin_runner, admin_port = await admin.serve(admin.make_admin_app(router), "127.0.0.1", 0)
        running = RunningRouter(
            router, f"http://127.0.0.1:{traffic.port}", traffic, f"http://127.0.0.1:{admin_port}", admin_runner
        )
        started.append(running)
        return running

    yield start
    for running in started:
        await running.runner.cleanup()
        await running.admin_runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


@pytest.fixture
def refused_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
