"""Bad input gets a 4xx JSON error and never reaches a replica; no replicas gives 503."""

from __future__ import annotations

import aiohttp

from proxyharness import RouterFactory, SimFactory
from warmstart.api.routers import RouterConfig


async def error_of(response: aiohttp.ClientResponse) -> dict[str, object]:
    assert response.content_type == "application/json"
    payload = await response.json()
    assert isinstance(payload["error"]["message"], str)
    return payload["error"]  # type: ignore[no-any-return]


async def test_malformed_json_is_400(sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(), [replica.url])
    async with client.post(
        router.url + "/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 400
        assert (await error_of(response))["code"] == 400
    async with client.post(router.url + "/v1/chat/completions", json=[1, 2]) as response:
        assert response.status == 400
    assert replica.replica.engine.counters.requests == 0


async def test_wrong_content_type_is_415(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(), [replica.url])
    async with client.post(
        router.url + "/v1/completions", data=b'{"prompt": "x"}', headers={"Content-Type": "text/plain"}
    ) as response:
        assert response.status == 415
        await error_of(response)


async def test_oversized_body_is_413_with_and_without_content_length(
    sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    [replica] = await sims(1)
    router = await routers(RouterConfig(max_body_bytes=2048), [replica.url])
    big = b'{"prompt": "' + b"x" * 5000 + b'"}'
    async with client.post(
        router.url + "/v1/completions", data=big, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 413
        await error_of(response)

    async def chunked() -> object:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    async with client.post(
        router.url + "/v1/completions", data=chunked(), headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 413
    assert replica.replica.engine.counters.requests == 0


async def test_no_replicas_is_503(routers: RouterFactory, client: aiohttp.ClientSession) -> None:
    router = await routers(RouterConfig(strategy="prefixaware"), [])
    async with client.post(router.url + "/v1/completions", json={"prompt": "x"}) as response:
        assert response.status == 503
        assert "no ready model replicas" in str((await error_of(response))["message"])
    async with client.get(router.url + "/ready") as response:
        assert response.status == 503
