"""The load generator: open-loop Poisson requests and closed-loop chats, measuring TTFT per request.

TTFT is measured at the client (send -> first SSE data event). The replica reports its own
TTFT in model seconds (``sim_ttft_s`` in the first chunk); the reported TTFT is that plus the
rest of the client's wait in *real* seconds (network, router, event loops), so the engine runs
time-scaled while every router's real overhead counts once, not 1/scale times. ``ttft_scaled``
keeps the plain client measurement divided by the scale (overhead magnified 1/scale times).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from warmstart.sim import workloads


@dataclass
class Result:
    group: str
    sent: float  # real seconds since the run started
    ttft: float | None  # model seconds, router/network overhead at 1x
    latency: float | None  # model seconds
    replica: str | None
    error: str | None = None
    ttft_scaled: float | None = None  # client TTFT / scale (overhead magnified)
    path_delay: float | None = None  # real seconds: client, network, router and event-loop delays


def _replica_of(response_id: str) -> str | None:
    parts = response_id.split("-")  # "cmpl-<replica>-<n>"
    return parts[1] if len(parts) >= 3 else None


@dataclass
class Stream:
    ttft: float | None = None
    ttft_scaled: float | None = None
    path_delay: float | None = None  # real seconds of the first byte's wait not spent in the engine
    latency: float | None = None
    replica: str | None = None
    text: str = ""
    error: str | None = None


async def stream_one(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], scale: float, collect_text: bool = False
) -> Stream:
    """POST one streaming request and time it (see the module docstring for the TTFT definition)."""
    started = time.perf_counter()
    out = Stream()
    texts: list[str] = []
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                out.error = f"http {response.status}"
                return out
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue
                if out.ttft is None:
                    real = time.perf_counter() - started
                    event = json.loads(line[6:])
                    engine = event.get("sim_ttft_s")
                    out.ttft_scaled = real / scale
                    if engine is not None:
                        out.path_delay = max(0.0, real - float(engine) * scale)
                        out.ttft = float(engine) + out.path_delay
                    else:
                        out.ttft = out.ttft_scaled
                    out.replica = _replica_of(str(event.get("id", "")))
                    if "error" in event:
                        out.ttft, out.error = None, "stream error"
                        return out
                    if collect_text:
                        texts.append(_delta(event))
                elif collect_text or b'"error"' in line:
                    event = json.loads(line[6:])
                    if "error" in event:
                        out.error = "stream error"
                        return out
                    texts.append(_delta(event))
    except (TimeoutError, aiohttp.ClientError) as exc:
        out.error = type(exc).__name__
        return out
    out.latency = (time.perf_counter() - started) / scale
    out.text = "".join(texts)
    return out


def _delta(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    return str(choice.get("text") or (choice.get("delta") or {}).get("content") or "")


Event = tuple[float, Callable[[], Awaitable[None]]]


def spreader(base_urls: str | list[str]) -> Callable[[], str]:
    """Each call picks one of ``base_urls`` uniformly at random (a Service's random spreading), seeded."""
    import random

    choices = [base_urls] if isinstance(base_urls, str) else list(base_urls)
    rng = random.Random(0)
    return lambda: choices[0] if len(choices) == 1 else rng.choice(choices)


async def open_loop(
    session: aiohttp.ClientSession,
    base_urls: str | list[str],
    requests: list[workloads.Request],
    scale: float,
    events: list[Event] | None = None,
) -> list[Result]:
    """Send ``requests`` at their arrival times (model seconds x scale); run ``events`` at theirs.

    With several ``base_urls`` (router replicas) each request goes to one of them at random.
    """
    results: list[Result] = []
    start = time.perf_counter()
    pick = spreader(base_urls)

    async def one(request: workloads.Request) -> None:
        sent = time.perf_counter() - start
        got = await stream_one(session, pick() + request.path, request.body, scale)
        results.append(
            Result(request.group, sent, got.ttft, got.latency, got.replica, got.error, got.ttft_scaled, got.path_delay)
        )

    async def fire_events() -> None:
        for at, action in sorted(events or [], key=lambda e: e[0]):
            delay = start + at * scale - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await action()

    event_task = asyncio.create_task(fire_events())
    tasks = []
    for request in requests:
        delay = start + request.at * scale - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(request)))
    await asyncio.gather(*tasks)
    await event_task
    return results


async def conversations(
    session: aiohttp.ClientSession, base_urls: str | list[str], users: list[workloads.Conversation], scale: float
) -> list[Result]:
    """Each user sends its rounds in turn, appending the reply to its history (each round to a random router)."""
    results: list[Result] = []
    start = time.perf_counter()
    pick = spreader(base_urls)

    async def user(conversation: workloads.Conversation) -> None:
        await asyncio.sleep(conversation.start_at * scale)
        for round_index in range(len(conversation.questions)):
            body = workloads.chat_body(conversation, round_index)
            sent = time.perf_counter() - start
            got = await stream_one(session, pick() + "/v1/chat/completions", body, scale, collect_text=True)
            results.append(
                Result(
                    conversation.user,
                    sent,
                    got.ttft,
                    got.latency,
                    got.replica,
                    got.error,
                    got.ttft_scaled,
                    got.path_delay,
                )
            )
            conversation.history += [
                {"role": "user", "content": conversation.questions[round_index]},
                {"role": "assistant", "content": got.text},
            ]
            await asyncio.sleep(conversation.think_s * scale)

    await asyncio.gather(*(user(c) for c in users))
    return results


async def replica_counters(session: aiohttp.ClientSession, urls: list[str]) -> dict[str, tuple[float, float]]:
    """(prefix_cache_queries, prefix_cache_hits) per replica URL, from the replicas' own /metrics."""
    counters: dict[str, tuple[float, float]] = {}
    for url in urls:
        async with session.get(url + "/metrics") as response:
            text = await response.text()
        queries = hits = 0.0
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_queries_total"):
                queries = float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_hits_total"):
                hits = float(line.rsplit(" ", 1)[1])
        counters[url] = (queries, hits)
    return counters


async def reset_replicas(session: aiohttp.ClientSession, urls: list[str]) -> None:
    """Empty every replica's prefix cache (vLLM's /reset_prefix_cache) so each router starts cold."""
    for url in urls:
        async with session.post(url + "/reset_prefix_cache") as response:
            response.raise_for_status()


async def fixed_rate(
    session: aiohttp.ClientSession, url: str, rate: float, seconds: float, body: dict[str, Any]
) -> tuple[list[float], int]:
    """Non-streaming requests at a fixed rate; (latencies in real seconds, errors)."""
    latencies: list[float] = []
    errors = 0
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}

    async def one() -> None:
        nonlocal errors
        started = time.perf_counter()
        try:
            async with session.post(url, data=payload, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
                    return
        except (TimeoutError, aiohttp.ClientError):
            errors += 1
            return
        latencies.append(time.perf_counter() - started)

    count = int(rate * seconds)
    start = time.perf_counter()
    tasks = []
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return latencies, errors


async def router_spills(session: aiohttp.ClientSession, router_url: str) -> float:
    """warmstart_router_spills_total summed over strategies (0 for other routers)."""
    try:
        async with session.get(router_url + "/metrics") as response:
            text = await response.text()
    except aiohttp.ClientError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("warmstart_router_spills_total")
    )


async def histogram_buckets(session: aiohttp.ClientSession, url: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of a Prometheus histogram at ``url``/metrics (upper bound -> count)."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    buckets: dict[float, float] = {}
    prefix = name + '_bucket{le="'
    for line in text.splitlines():
        if line.startswith(prefix):
            bound = line[len(prefix) :].split('"', 1)[0]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound of the bucket holding quantile ``q`` of the observations between two scrapes."""
    bounds = sorted(after)
    total = after[bounds[-1]] - before.get(bounds[-1], 0.0) if bounds else 0.0
    for bound in bounds:
        if total and after[bound] - before.get(bound, 0.0) >= q * total:
            return bound
    return float("nan")


async def peak_replica_load(
    session: aiohttp.ClientSession, urls: list[str], stop: asyncio.Event, every: float = 0.25
) -> dict[str, float]:
    """Highest running + waiting sequences each replica reported while ``stop`` is unset (polled)."""
    peaks = dict.fromkeys(urls, 0.0)
    while not stop.is_set():
        for url in urls:
            try:
                async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as response:
                    text = await response.text()
            except (TimeoutError, aiohttp.ClientError):
                continue
            load = 0.0
            for line in text.splitlines():
                if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                    load += float(line.rsplit(" ", 1)[1])
            peaks[url] = max(peaks[url], load)
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
    return peaks
