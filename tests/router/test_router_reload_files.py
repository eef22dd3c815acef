"""Outside a cluster: --config and --backends-file are re-read while the router serves."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp

from proxyharness import RouterFactory, SimFactory
from warmstart.api.routers import RouterConfig
from warmstart.router import discovery


async def status(client: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with client.get(url + "/router/status") as response:
        return await response.json()  # type: ignore[no-any-return]


async def wait_for(predicate: object, client: aiohttp.ClientSession, url: str) -> dict[str, object]:
    for _ in range(200):
        current = await status(client, url)
        if predicate(current):  # type: ignore[operator]
            return current
        await asyncio.sleep(0.05)
    return current


def touch(path: Path, text: str, bump: int) -> None:
    path.write_text(text)
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + bump))  # a new mtime even on coarse clocks


async def test_strategy_and_replicas_change_live(
    tmp_path: Path, sims: SimFactory, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    replicas = await sims(3)
    config_file, backends_file = tmp_path / "router.yaml", tmp_path / "backends"
    touch(config_file, RouterConfig(strategy="random").to_yaml(), 0)
    touch(backends_file, replicas[0].url + "\n", 0)
    router = await routers()
    watcher = discovery.FileWatcher(str(config_file), str(backends_file), interval=0.05)
    await watcher.start(router.router)
    try:
        first = await status(client, router.admin_url)
        assert first["strategy"] == "random"
        assert [b["url"] for b in first["backends"]] == [replicas[0].url]  # type: ignore[index,union-attr]

        touch(config_file, "strategy: prefix_aware\nmaxConcurrentRequests: 16\n", 5)
        touch(backends_file, f"{replicas[1].url}, {replicas[2].url}  # two now\n", 5)
        now = await wait_for(
            lambda s: s["strategy"] == "prefixaware" and len(s["backends"]) == 2, client, router.admin_url
        )
        assert now["strategy"] == "prefixaware"
        assert now["config"]["maxConcurrentRequests"] == 16  # type: ignore[index]
        assert sorted(b["url"] for b in now["backends"]) == sorted([replicas[1].url, replicas[2].url])  # type: ignore[union-attr]
        async with client.post(router.url + "/v1/completions", json={"prompt": "x" * 600, "max_tokens": 1}) as r:
            assert r.headers["x-sim-replica"] in {"r1", "r2"}
    finally:
        await watcher.stop()


async def test_an_invalid_config_keeps_the_previous_one(tmp_path: Path, routers: RouterFactory) -> None:
    config_file = tmp_path / "router.yaml"
    touch(config_file, "strategy: session\n", 0)
    router = await routers()
    watcher = discovery.FileWatcher(str(config_file))
    watcher.poll(router.router)
    assert router.router.strategy.value == "session"
    touch(config_file, "strategy: fastest-possible\n", 5)
    watcher.poll(router.router)
    assert router.router.strategy.value == "session"


def test_backends_file_syntax() -> None:
    text = "http://a:1, http://b:2\n# comment\nc:3  # trailing\n\n"
    assert discovery.parse_backends(text) == ["http://a:1", "http://b:2", "c:3"]


async def test_an_empty_file_is_read_again_later_not_applied(tmp_path: Path, routers: RouterFactory) -> None:
    config_file, backends_file = tmp_path / "router.yaml", tmp_path / "backends"
    touch(config_file, "strategy: session\n", 0)
    touch(backends_file, "http://127.0.0.1:1\n", 0)
    router = await routers()
    watcher = discovery.FileWatcher(str(config_file), str(backends_file))
    watcher.poll(router.router)
    touch(config_file, "", 5)  # truncated by an editor, not yet rewritten
    touch(backends_file, "", 5)
    watcher.poll(router.router)
    assert router.router.strategy.value == "session"
    assert router.router.fleet.urls() == ["http://127.0.0.1:1"]
    touch(config_file, "strategy: roundrobin\n", 10)
    watcher.poll(router.router)
    assert router.router.strategy.value == "roundrobin"


async def test_malformed_yaml_is_reported_and_a_later_valid_config_still_applies(
    tmp_path: Path, routers: RouterFactory, client: aiohttp.ClientSession
) -> None:
    config_file = tmp_path / "router.yaml"
    touch(config_file, "strategy: session\n", 0)
    router = await routers()
    watcher = discovery.FileWatcher(str(config_file), interval=0.05)
    await watcher.start(router.router)
    try:
        touch(config_file, "strategy: [not, valid\n", 5)  # not even YAML
        broken = await wait_for(lambda s: s["configError"] is not None, client, router.admin_url)
        assert broken["strategy"] == "session"
        assert "YAML" in broken["configError"]["reason"]  # type: ignore[index]
        metrics = await (await client.get(router.admin_url + "/metrics")).text()
        assert "warmstart_router_config_errors_total 1.0" in metrics
        assert "warmstart_router_config_valid 0.0" in metrics

        touch(config_file, "strategy: roundrobin\n", 10)
        fixed = await wait_for(lambda s: s["strategy"] == "roundrobin", client, router.admin_url)
        assert fixed["configError"] is None
        metrics = await (await client.get(router.admin_url + "/metrics")).text()
        assert "warmstart_router_config_valid 1.0" in metrics
    finally:
        await watcher.stop()
