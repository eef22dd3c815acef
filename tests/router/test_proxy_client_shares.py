"""One client address cannot take the router's whole body budget: per-client shares of bytes and of bodies in transit.

Real sockets against an in-process router; two client addresses on loopback (127.0.0.2 attacks,
127.0.0.1 is the bystander). The attacker stalls bodies one byte short, so what it holds stays
held while the bystander posts. Asserted: the statuses each client gets and the budget's counts.
"""

from __future__ import annotations

import asyncio

import aiohttp

from proxyharness import RouterFactory, SimFactory
from warmstart.api.routers import RouterConfig

KIB, MIB = 1024, 1024 * 1024
ATTACKER = "127.0.0.2"


async def stall(host: str, port: int, size: int, sent: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """From the attacker's address: a body of ``size`` bytes of which only ``sent`` are sent."""
    reader, writer = await asyncio.open_connection(host, port, local_addr=(ATTACKER, 0))
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    )
    writer.write(head.encode() + b" " * sent)
    await writer.drain()
    return reader, writer


async def status_or_none(reader: asyncio.StreamReader) -> bytes | None:
    """The status of a reply already sent, or None while the router still waits for the body."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=0.5)
    except TimeoutError:
        return None
    return head.split(b" ", 2)[1]


async def test_one_client_filling_its_share_leaves_room_for_others(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    config = RouterConfig(
        max_buffered_bytes=4 * MIB,
        max_buffered_bytes_per_client=2 * MIB,
        max_body_bytes=MIB,
        body_timeout_seconds=120,
    )
    router = await routers(config, [replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    budget = router.runner.budget
    stalled = [await stall(host, int(port), MIB, MIB - 1) for _ in range(6)]  # 6 MiB wanted, one byte short each
    statuses = [await status_or_none(reader) for reader, _ in stalled]
    try:
        assert statuses.count(b"429") >= 4  # beyond its 2 MiB share
        assert b"503" not in statuses  # never the router-wide budget
        assert budget.held <= 2 * MIB
        assert budget.clients[ATTACKER].held == budget.held
        for _ in range(3):  # the bystander's requests go through while the attacker holds its share
            async with client.post(router.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}) as response:
                assert response.status == 200
    finally:
        for _, writer in stalled:
            writer.close()
    for _ in range(200):
        if budget.held == 0:
            break
        await asyncio.sleep(0.05)
    assert budget.held == 0
    assert budget.clients == {}


async def test_one_client_sends_a_bounded_number_of_bodies_at_once(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    config = RouterConfig(max_bodies_per_client=4, body_timeout_seconds=120)
    router = await routers(config, [replica.url])
    host, port = router.url.removeprefix("http://").split(":")
    stalled = [await stall(host, int(port), 4 * KIB, 1) for _ in range(8)]
    statuses = [await status_or_none(reader) for reader, _ in stalled]
    try:
        assert statuses.count(None) == 4  # four bodies in transit, waited for
        assert statuses.count(b"429") == 4  # one more each time: refused
        assert router.runner.budget.clients[ATTACKER].receiving == 4
        async with client.post(router.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}) as response:
            assert response.status == 200
    finally:
        for _, writer in stalled:
            writer.close()
