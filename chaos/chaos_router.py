"""Scenario 5: the router under 10,000 requests with client disconnects, dying and hanging backends, and churn.

The router's real aiohttp application serves on loopback in front of simulated vLLM replicas (`warmstart.sim`), a
backend that hangs (headers never come), and one that dies mid-stream (sends two SSE events, then resets the
connection). Meanwhile a churn task replaces the backend list (as EndpointSlice discovery does), switches the strategy
(as a ConfigMap change does) and kills a simulated replica and starts a new one. Clients disconnect before the headers,
mid-body (a declared body that never completes) and mid-stream.

Invariants after each batch: every in-flight counter (replica and Prometheus gauge) and the prefill backlog are 0 and
the admission queue is empty; no request outlived its deadline (the router's read timeout plus a retry and slack); the
process's memory grows by less than a bound between the first and the last batch; the router still answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import psutil
from aiohttp import web

from chaos_report import Run
from warmstart.api.routers import RouterConfig
from warmstart.router import proxying
from warmstart.router.routing import Router
from warmstart.sim.engine import EngineParams
from warmstart.sim.server import SimReplica
from warmstart.sim.server import serve as serve_replica

SCENARIO = "router: 1,000 requests per run, disconnects, dying/hanging backends, churn"
READ_TIMEOUT = 1.5
CONNECT_TIMEOUT = 1.0
#: the longest any request may take: connect + read on two attempts, the body deadline, and slack for a loaded host
DEADLINE = 2 * (CONNECT_TIMEOUT + READ_TIMEOUT) + 2.0 + 6.0
MEMORY_BOUND_MIB = 64
PROMPT = "You are a helpful assistant. Answer briefly and precisely. " * 12
STRATEGIES = ["prefixaware", "random", "roundrobin", "leastoutstanding"]


@dataclass
class Backends:
    sims: dict[str, web.AppRunner] = field(default_factory=dict)
    faulty: list[str] = field(default_factory=list)
    runners: list[web.AppRunner] = field(default_factory=list)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def _hanging_app() -> web.Application:
    async def hang(request: web.Request) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(3600)
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/completions", hang)
    return app


def _dying_app() -> web.Application:
    async def die(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(2):
            await response.write(f'data: {{"choices":[{{"text":"t{i}"}}]}}\n\n'.encode())
            await asyncio.sleep(0.005)
        if request.transport is not None:
            request.transport.abort()  # the process died: a reset, no terminating chunk
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", die)
    return app


async def _start_sim(backends: Backends, name: str) -> str:
    replica = SimReplica(name, EngineParams(time_scale=0.001, max_running=16), stream_chunk_tokens=2)
    runner, port = await serve_replica(replica, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}"
    backends.sims[url] = runner
    return url


async def _churn(router: Router, backends: Backends, rng: random.Random, stop: asyncio.Event) -> int:
    """Change the backend list, the strategy, and kill/replace a replica, until `stop`; returns the changes made."""
    changes = 0
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(0.02, 0.15))
        action = rng.random()
        if action < 0.5:
            urls = list(backends.sims)
            keep = rng.sample(urls, rng.randint(1, len(urls)))
            router.set_backends(keep + [u for u in backends.faulty if rng.random() < 0.5])
        elif action < 0.8:
            router.apply_config(
                RouterConfig.model_validate({**router.config.model_dump(), "strategy": rng.choice(STRATEGIES)})
            )
        else:  # kill a replica while it serves, start another (a pod replaced)
            victim = rng.choice(list(backends.sims))
            await backends.sims.pop(victim).cleanup()
            await _start_sim(backends, f"s{changes}")
            router.set_backends(list(backends.sims) + backends.faulty)
        changes += 1
    router.set_backends(list(backends.sims) + backends.faulty)
    return changes


async def _raw_partial_body(url: str) -> None:
    """Declare a 4 KiB JSON body, send part of it, disconnect."""
    host, port = url.removeprefix("http://").split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
    writer.write(head.encode() + b'{"prompt": "' + b"a" * 500)
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.close()


async def _one(session: aiohttp.ClientSession, url: str, mode: str, i: int) -> None:
    body = {"prompt": PROMPT + f"#{i % 53}", "max_tokens": 24, "stream": mode != "complete"}
    if mode == "disconnect_before_headers":
        try:
            await asyncio.wait_for(session.post(url + "/v1/completions", json=body), 0.002)
        except TimeoutError:
            pass
        return
    if mode == "disconnect_mid_body":
        await _raw_partial_body(url)
        return
    async with session.post(url + "/v1/completions", json=body) as response:
        if mode == "disconnect_mid_stream" and response.status == 200:
            await response.content.readuntil(b"\n\n")
            response.close()
        else:
            await response.read()


async def _timed(
    semaphore: asyncio.Semaphore,
    session: aiohttp.ClientSession,
    url: str,
    mode: str,
    i: int,
    took_all: list[float],
    modes: dict[str, int],
) -> None:
    """One request of `mode`, its duration appended to `took_all` whatever happened to it."""
    async with semaphore:
        started = time.monotonic()
        try:
            await asyncio.wait_for(_one(session, url, mode, i), DEADLINE + 20)
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            pass
        took_all.append(time.monotonic() - started)
        modes[mode] = modes.get(mode, 0) + 1


MODES = ["complete", "stream", "disconnect_before_headers", "disconnect_mid_body", "disconnect_mid_stream"]


def _inflight_leaks(router: Router) -> list[str]:
    leaks = []
    for backend in router.status()["backends"]:
        if backend["inflight"]:
            leaks.append(f"replica {backend['url']} inflight={backend['inflight']}")
    for metric in router.metrics.inflight.collect():
        for sample in metric.samples:
            if sample.value:
                leaks.append(f"gauge {sample.labels} = {sample.value}")
    if any(r.prefill_chars for r in router.fleet.replicas()):
        leaks.append("prefill backlog not 0")
    if router.admission.depth:
        leaks.append(f"admission queue depth {router.admission.depth}")
    return leaks


async def _settle(router: Router, limit: float) -> float:
    """Seconds until nothing is in flight (or `limit`)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if not _inflight_leaks(router):
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def run_batches(
    batches: int, per_batch: int, seed: int, deadline: float, report: Callable[[Run], None]
) -> list[Run]:
    rng = random.Random(seed)
    backends = Backends()
    for n in range(4):
        await _start_sim(backends, f"r{n}")
    for app in (_hanging_app(), _dying_app()):
        runner, url = await _serve(app)
        backends.runners.append(runner)
        backends.faulty.append(url)
    config = RouterConfig(
        strategy="prefixaware",
        read_timeout_seconds=READ_TIMEOUT,
        connect_timeout_seconds=CONNECT_TIMEOUT,
        body_timeout_seconds=2.0,
        max_concurrent_requests=8,
        max_queue_size=32,
    )
    router = Router(config, list(backends.sims) + backends.faulty)
    traffic = await proxying.serve(router, "127.0.0.1", 0, header_timeout=3.0)
    url = f"http://127.0.0.1:{traffic.port}"
    process = psutil.Process()
    baseline_rss: float | None = None
    out: list[Run] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE + 30)) as session:
            for batch in range(batches):
                if time.monotonic() > deadline:
                    break
                stop = asyncio.Event()
                churn = asyncio.create_task(_churn(router, backends, rng, stop))
                took_all: list[float] = []
                modes: dict[str, int] = {}
                semaphore = asyncio.Semaphore(48)
                requests = (
                    _timed(semaphore, session, url, rng.choice(MODES), i, took_all, modes) for i in range(per_batch)
                )
                await asyncio.gather(*requests)
                late = [took for took in took_all if took > DEADLINE]
                stop.set()
                changes = await churn
                seconds = await _settle(router, 30.0)
                leaks = _inflight_leaks(router)
                violations = (
                    [f"{len(late)} requests outlived the {DEADLINE:.0f} s deadline (max {max(late):.1f} s)"]
                    if late
                    else []
                )
                async with session.get(url + "/healthz") as health:
                    if health.status != 200:
                        violations.append(f"/healthz answered {health.status}")
                rss = process.memory_info().rss / 2**20
                if baseline_rss is None:
                    baseline_rss = rss
                elif rss - baseline_rss > MEMORY_BOUND_MIB:
                    violations.append(f"RSS grew {rss - baseline_rss:.0f} MiB since the first batch")
                slowest = max(took_all) if took_all else 0.0
                note = f"slowest request {slowest:.1f} s, {changes} churn events, RSS {rss:.0f} MiB"
                note += f", modes {dict(sorted(modes.items()))}"
                record = Run(SCENARIO, batch, not leaks, seconds, leaks, violations, note)
                report(record)
                out.append(record)
    finally:
        await traffic.cleanup()
        for sim in backends.sims.values():
            await sim.cleanup()
        for other in backends.runners:
            await other.cleanup()
    return out


def run_all(batches: int, per_batch: int, seed: int, deadline: float, report: Callable[[Run], None]) -> list[Run]:
    logging.getLogger("warmstart.router").setLevel(logging.ERROR)  # a warning per injected fault otherwise
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # a simulated replica's client left: a traceback
    return asyncio.run(run_batches(batches, per_batch, seed, deadline, report))
