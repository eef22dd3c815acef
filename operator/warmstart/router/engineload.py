"""Read each engine's own load from its Prometheus ``/metrics``, so every router replica sees the same numbers.

The router polls every replica's metrics endpoint (``engineMetricsPath`` on the replica's port)
every ``engineLoadIntervalSeconds`` and keeps three figures per replica: requests running,
requests waiting, and KV-cache usage (0-1). Engines name them differently; the mapping is:

=================  ============================  ==============================  =============================
figure             vLLM                          llama.cpp server (``--metrics``)  SGLang
=================  ============================  ==============================  =============================
running            ``vllm:num_requests_running``  ``llamacpp:requests_processing``  ``sglang:num_running_reqs``
waiting            ``vllm:num_requests_waiting``  ``llamacpp:requests_deferred``    ``sglang:num_queue_reqs``
KV-cache usage     ``vllm:kv_cache_usage_perc``   ``llamacpp:kv_cache_usage_ratio`` ``sglang:token_usage``
                   (``vllm:gpu_cache_usage_perc``
                   before vLLM 0.10)
=================  ============================  ==============================  =============================

Samples of one name are summed over their labels (several models or engines in one server). A
replica whose metrics cannot be read or name none of these has no engine load: the policy then
uses the router's own in-flight count for it.

The router's own placements count against a replica until a scrape that *started after* them
reports the engine's load (:meth:`EngineLoads.load`), so two requests a few milliseconds apart
do not both go to the replica that looked idle.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")
#: Requests the engine has served (a counter): its recent rate is each replica's request share, the same for every
#: router (llama.cpp's server exports no such counter; its replicas have no share signal)
SERVED = ("vllm:request_success_total", "sglang:num_requests_total")
#: Seconds over which the served-request rate is averaged (exponentially).
RATE_SECONDS = 10.0
KV_USAGE = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "llamacpp:kv_cache_usage_ratio",
    "sglang:token_usage",
)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of one engine."""

    running: float
    waiting: float
    kv_usage: float | None
    started: float
    """``time.monotonic()`` when the scrape was sent: placements before it are reflected."""
    served: float | None = None
    """The engine's served-request counter, when it exports one."""

    @property
    def requests(self) -> float:
        return self.running + self.waiting


def parse(text: str, started: float) -> EngineLoad | None:
    """The load figures in a Prometheus text exposition, or None when it names none of them."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in RUNNING or sample.name in WAITING or sample.name in KV_USAGE or sample.name in SERVED:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    running = next((sums[name] for name in RUNNING if name in sums), None)
    waiting = next((sums[name] for name in WAITING if name in sums), None)
    usage = next((sums[name] for name in KV_USAGE if name in sums), None)
    served = next((sums[name] for name in SERVED if name in sums), None)
    if running is None and waiting is None:
        return None
    return EngineLoad(running or 0.0, waiting or 0.0, usage, started, served)


class EngineLoads:
    """The latest engine load of every replica, plus the router's own picks not yet reflected."""

    def __init__(self, max_age_seconds: float = 5.0) -> None:
        self.max_age_seconds = max_age_seconds
        self._loads: dict[str, EngineLoad] = {}
        self._picks: dict[str, deque[float]] = {}
        self._rates: dict[str, float] = {}
        self.scrapes = 0
        self.failures = 0

    def update(self, replica: str, load: EngineLoad | None) -> None:
        if load is None:
            self._loads.pop(replica, None)
            return
        previous = self._loads.get(replica)
        self._loads[replica] = load
        if previous is not None and previous.served is not None and load.served is not None:
            elapsed = load.started - previous.started
            if elapsed > 0 and load.served >= previous.served:
                weight = math.exp(-elapsed / RATE_SECONDS)
                rate = (load.served - previous.served) / elapsed
                self._rates[replica] = weight * self._rates.get(replica, rate) + (1 - weight) * rate
        picks = self._picks.get(replica)
        while picks and picks[0] <= load.started:
            picks.popleft()

    def picked(self, replica: str, now: float) -> None:
        """The router just sent a request to ``replica``."""
        self._picks.setdefault(replica, deque()).append(now)

    def load(self, replica: str, now: float) -> float | None:
        """Engine-reported requests plus this router's picks since that scrape; None when unknown or stale."""
        reported = self._loads.get(replica)
        if reported is None or now - reported.started > self.max_age_seconds:
            return None
        return reported.requests + len(self._picks.get(replica, ()))

    def rate(self, replica: str) -> float | None:
        """The engine's recent served requests per second (its request share), when known."""
        return self._rates.get(replica)

    def reported(self, replica: str) -> EngineLoad | None:
        return self._loads.get(replica)

    def replicas(self) -> list[str]:
        """Replicas with a reported load."""
        return list(self._loads)

    def forget(self, replica: str) -> None:
        self._loads.pop(replica, None)
        self._rates.pop(replica, None)
        self._picks.pop(replica, None)


class EngineLoadPoller:
    """Scrapes every replica's metrics endpoint on a fixed interval, concurrently."""

    def __init__(self, loads: EngineLoads, path: str, interval: float, timeout: float = 1.0) -> None:
        self.loads = loads
        self.path = path
        self.interval = interval
        self.timeout = timeout
        self._replicas: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def set_replicas(self, urls: Iterable[str]) -> None:
        self._replicas = sorted(urls)
        for url in self.loads.replicas():
            if url not in self._replicas:
                self.loads.forget(url)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="router-engine-load")

    def cancel(self) -> None:
        """Stop polling now (its session closes as the task ends)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout), connector=aiohttp.TCPConnector(limit=64)
        )
        try:
            while True:
                started = time.monotonic()
                await asyncio.gather(*(self._scrape(url) for url in self._replicas))
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            session, self._session = self._session, None
            await session.close()

    async def _scrape(self, url: str) -> None:
        assert self._session is not None
        started = time.monotonic()
        try:
            async with self._session.get(url + self.path) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                text = await response.text()
            load = parse(text, started)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
            self.loads.failures += 1
            load = None
        self.loads.scrapes += 1
        if url in self._replicas:
            self.loads.update(url, load)
