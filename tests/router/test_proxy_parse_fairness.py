"""Another client's huge bodies do not starve a prompt: the parse worker serves client addresses round-robin.

Real sockets against an in-process router (its parse worker a real process). The attacker
(127.0.0.2) sends four ~8 MiB bodies of millions of empty messages, each seconds of parsing; once
the router holds them all, a bystander (127.0.0.1) sends a 106 KiB prompt, also parsed by the
worker. Asserted: the order in which the replica receives them (the prompt behind at most the
body being parsed when it came), not how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from proxyharness import RouterFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import admin

MIB, KIB = 1024 * 1024, 1024
ATTACKER = "127.0.0.2"


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[int]]]:
    """A replica that records the size of every body it receives, in order."""
    sizes: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        sizes.append(len(await request.read()))
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=64 * MIB)
    app.router.add_post("/v1/chat/completions", handle)
    runner, port = await admin.serve(app, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{port}", sizes
    await runner.cleanup()


async def test_a_prompt_is_parsed_before_another_clients_queued_huge_bodies(
    recorder: tuple[str, list[int]], routers: RouterFactory
) -> None:
    url, arrived = recorder
    config = RouterConfig(strategy="prefixaware", max_buffered_bytes=128 * MIB, max_buffered_bytes_per_client=64 * MIB)
    router = await routers(config, [url])
    hostile = b'{"model":"m","messages":[' + b",".join([b"{}"] * ((8 * MIB - 64) // 3)) + b"]}"
    prompt = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q" * (106 * KIB)}]}).encode()
    headers = {"Content-Type": "application/json"}
    budget = router.runner.budget
    attacker = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ATTACKER, 0), limit=0))
    async with attacker, aiohttp.ClientSession() as bystander:

        async def post(session: aiohttp.ClientSession, body: bytes) -> int:
            async with session.post(router.url + "/v1/chat/completions", data=body, headers=headers) as response:
                await response.read()
                return response.status

        attacks = [asyncio.create_task(post(attacker, hostile)) for _ in range(4)]
        for _ in range(1200):  # until the router holds all four (the first is being parsed, three wait)
            if budget.held >= 4 * len(hostile):
                break
            await asyncio.sleep(0.05)
        assert budget.held >= 4 * len(hostile)
        before = len(arrived)  # the attacker's bodies parsed already; the others wait, or one is being parsed
        assert before <= 2  # at least two still wait: first come, first served would put the prompt behind both
        assert await post(bystander, prompt) == 200
        assert await asyncio.gather(*attacks) == [200] * 4
    assert len(arrived) == 5
    assert arrived.index(len(prompt)) <= before + 1  # behind at most the body the worker was parsing
