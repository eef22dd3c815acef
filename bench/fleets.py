"""Start and steer the benchmark's processes: simulated replicas, warmstart routers, SGLang routers.

Every process is a child of the benchmark, logs to ``bench/out/logs/``, listens on loopback only
and is stopped (SIGTERM, then SIGKILL) by :meth:`Proc.stop`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

PYTHON = sys.executable
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_block(count: int) -> int:
    """A base port such that base .. base+count-1 are all free right now."""
    import random

    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        socks = []
        try:
            for offset in range(count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind((HOST, base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no block of free ports")


@dataclass
class Proc:
    """A child process with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=8)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)

    def alive(self) -> bool:
        return self.popen.poll() is None


def spawn(name: str, argv: list[str], logs: Path, extra_env: dict[str, str] | None = None) -> Proc:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    handle = log.open("wb")
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    popen = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Proc(name, popen, log)


async def wait_http(session: aiohttp.ClientSession, url: str, proc: Proc, timeout: float = 60.0) -> None:
    """Wait until ``url`` answers 200, or fail with the process's log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            break
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                if response.status == 200:
                    return
        except (TimeoutError, aiohttp.ClientError):
            pass
        await asyncio.sleep(0.2)
    tail = proc.log.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{proc.name} did not become ready at {url}:\n{tail}")


def sim_argv(replicas: int, base_port: int, sim_args: list[str], name_prefix: str = "r") -> list[str]:
    return [
        PYTHON,
        "-m",
        "warmstart.cli",
        "sim",
        "--replicas",
        str(replicas),
        "--base-port",
        str(base_port),
        "--host",
        HOST,
        "--name-prefix",
        name_prefix,
        "--log-level",
        "WARNING",
        *sim_args,
    ]


@dataclass
class RouterUnderTest:
    """A router (or the direct ideal replica) the load generator talks to."""

    label: str
    url: str
    kind: str  # "warmstart", "sglang" or "direct"
    proc: Proc | None = None
    backends_file: Path | None = None
    backends: list[str] = field(default_factory=list)
    admin_url: str = ""
    """warmstart: the admin port (/metrics, /router/status); others: same as ``url``."""

    peers: list[RouterUnderTest] = field(default_factory=list)
    """Further router processes with the same configuration; clients spread over all at random."""

    @property
    def internals(self) -> str:
        """Where this router's metrics and status are served."""
        return self.admin_url or self.url

    @property
    def urls(self) -> list[str]:
        """The traffic URLs clients spread over (one unless there are peers)."""
        return [self.url] + [peer.url for peer in self.peers]

    @property
    def members(self) -> list[RouterUnderTest]:
        return [self, *self.peers]

    def stop(self) -> None:
        for peer in self.peers:
            peer.stop()
        if self.proc is not None:
            self.proc.stop()

    async def set_backends(self, session: aiohttp.ClientSession, urls: list[str]) -> None:
        """Change the replica set live (warmstart: backends file; SGLang: its /workers API)."""
        for peer in self.peers:
            await peer.set_backends(session, urls)
        if self.kind == "warmstart":
            assert self.backends_file is not None
            staging = self.backends_file.with_suffix(".new")  # atomic replace: never a half-written file
            staging.write_text("\n".join(urls) + "\n")
            staging.replace(self.backends_file)
            await self._wait_backends(session, urls, "/router/status", lambda s: [b["url"] for b in s["backends"]])
        elif self.kind == "sglang":
            workers = await _json(session, self.url + "/workers")
            current = {w["url"]: w["id"] for w in workers["workers"]}
            for url in urls:
                if url not in current:
                    async with session.post(self.url + "/workers", json={"url": url}) as response:
                        response.raise_for_status()
            for url, worker_id in current.items():
                if url not in urls:
                    async with session.delete(f"{self.url}/workers/{worker_id}") as response:
                        response.raise_for_status()
            await self._wait_backends(
                session, urls, "/workers", lambda s: [w["url"] for w in s["workers"] if w.get("is_healthy", True)]
            )
        self.backends = list(urls)

    async def _wait_backends(self, session: aiohttp.ClientSession, urls: list[str], path: str, extract: Any) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if sorted(extract(await _json(session, self.internals + path))) == sorted(urls):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.label}: backends did not become {urls}")


async def _json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as response:
        return await response.json(content_type=None)


async def start_warmstart(
    session: aiohttp.ClientSession,
    strategy: str,
    urls: list[str],
    logs: Path,
    config_extra: dict[str, Any] | None = None,
    source: Path | None = None,
    args: list[str] | None = None,
) -> RouterUnderTest:
    """``warmstart router`` as its own process, fed by a config file and a backends file.

    ``source``: run the router from this ``operator`` directory (an older commit, for a
    before/after comparison in one run) instead of the installed package. ``args``: more flags
    (e.g. the peer sync's, :func:`sync_args`).
    """
    from warmstart.api.routers import RouterConfig

    port, admin_port = free_port(), free_port()
    workdir = logs / f"warmstart-{strategy}-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    config = RouterConfig.model_validate({"strategy": strategy, **(config_extra or {})})
    env = {"PYTHONPATH": str(source)} if source is not None else None
    # only the knobs set here: an older router (``source``) keeps its own defaults for the rest
    (workdir / "router.yaml").write_text(yaml.safe_dump({"strategy": config.strategy.value, **(config_extra or {})}))
    backends = workdir / "backends"
    backends.write_text("\n".join(urls) + "\n")
    proc = spawn(
        f"warmstart-{strategy}",
        [
            PYTHON,
            "-m",
            "warmstart.cli",
            "router",
            "--host",
            HOST,
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
            "--config",
            str(workdir / "router.yaml"),
            "--backends-file",
            str(backends),
            "--reload-interval",
            "0.2",
            "--log-level",
            "WARNING",
            *(args or []),
        ],
        logs,
        env,
    )
    router = RouterUnderTest(
        f"warmstart {strategy}",
        f"http://{HOST}:{port}",
        "warmstart",
        proc,
        backends,
        urls,
        admin_url=f"http://{HOST}:{admin_port}",
    )
    await wait_http(session, router.url + "/ready", proc)
    return router


def sync_args(copies: int, logs: Path) -> list[list[str]]:
    """The flags of ``copies`` router processes that share their picks: one key, one peers file, a sync port each."""
    ports = [free_port() for _ in range(copies)]
    workdir = logs / f"sync-{ports[0]}"
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "key"
    key.write_bytes(os.urandom(32).hex().encode())
    peers = workdir / "peers"
    peers.write_text("".join(f"tcp://{HOST}:{port}\n" for port in ports))
    common = ["--sync-key-file", str(key), "--peers-file", str(peers), "--sync-advertise", HOST]
    return [["--sync-port", str(port), *common] for port in ports]


def checkout(ref: str, into: Path) -> Path:
    """The ``operator`` directory of git ``ref`` of this repository, extracted under ``into``."""
    repo = Path(__file__).resolve().parent.parent
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    target = into / f"source-{sha}"
    if not (target / "operator").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", sha, "operator"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "operator"


def sglang_available() -> str | None:
    """None if the SGLang router can be launched here, else the reason it cannot."""
    try:
        import sglang_router  # noqa: F401
    except ImportError as exc:
        return f"sglang-router is not installed ({exc}); install the 'bench' extra"
    if shutil.which("true") is None:  # pragma: no cover - sanity on exotic systems
        return "no POSIX userland"
    return None


#: SGLang cache_aware with its load-balance guard tuned tight (the launcher's defaults are 64 and 1.5):
#: it switches to the least loaded worker once loads differ by more than 2 requests and 1.2x.
SGLANG_GUARD = ["--balance-abs-threshold", "2", "--balance-rel-threshold", "1.2"]


async def start_sglang(
    session: aiohttp.ClientSession, policy: str, urls: list[str], logs: Path, extra: list[str] | None = None
) -> RouterUnderTest:
    """The real SGLang router (Rust), ``launch_router --policy <policy>`` plus ``extra`` flags."""
    port = free_port()
    proc = spawn(
        f"sglang-{policy}",
        [
            PYTHON,
            "-m",
            "sglang_router.launch_router",
            "--host",
            HOST,
            "--port",
            str(port),
            "--policy",
            policy,
            "--log-level",
            "warn",
            # its metrics exporter defaults to port 29000: a second SGLang router on the machine
            # (another benchmark) would make this one fail to start
            "--prometheus-port",
            str(free_port()),
            *(extra or []),
            "--worker-urls",
            *urls,
        ],
        logs,
    )
    router = RouterUnderTest(f"sglang {policy}", f"http://{HOST}:{port}", "sglang", proc, None, urls)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            workers = await _json(session, router.url + "/workers")
            if sorted(w["url"] for w in workers["workers"] if w.get("is_healthy", True)) == sorted(urls):
                return router
        except (TimeoutError, aiohttp.ClientError, KeyError, ValueError):
            pass
        if not proc.alive():
            break
        await asyncio.sleep(0.3)
    proc.stop()
    raise RuntimeError(f"SGLang router did not come up:\n{proc.log.read_text(errors='replace')[-2000:]}")
