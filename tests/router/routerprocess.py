"""A real `warmstart router` process on loopback (its own event loop and memory), for attack tests that measure it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import aiohttp
import psutil

MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RouterProcess:
    port: int
    admin_port: int
    process: psutil.Process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss(self) -> int:
        """The router's own resident memory, in bytes."""
        return int(self.process.memory_info().rss)


@contextlib.asynccontextmanager
async def router_process(backends: Sequence[str], *extra: str) -> AsyncIterator[RouterProcess]:
    """Start ``warmstart router`` with ``backends``; yield once ``/ready`` answers 200; stop it after."""
    port, admin = free_port(), free_port()
    args = ["router", "--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin)]
    args += ["--backends", ",".join(backends), *extra]
    proc = subprocess.Popen([sys.executable, "-m", "warmstart.cli", *args])
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/ready") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError(f"the router exited with {proc.returncode}")
                await asyncio.sleep(0.1)
        yield RouterProcess(port, admin, psutil.Process(proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
