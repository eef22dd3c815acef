"""The endpoint picker alone: pick latency and CPU per request, driven over gRPC as a gateway drives it.

    python bench/epp_picker.py [--requests 2000] [--seconds 10]

``warmstart router --mode epp`` runs as its own process (prefixaware, 8 replica addresses that
nothing serves: the picker never connects to them). A Python gRPC client plays the gateway's
side of the ext_proc stream for each request, in ``FULL_DUPLEX_STREAMED`` mode: request headers,
the body (about 4 KB, 16 prefix groups), then the response headers that end the request. The
*pick latency* is from sending the body's last piece to receiving the held headers answer with
the pick: what a gateway waits before it can connect upstream. CPU per request is the picker
process's on-CPU time (Linux schedstat) over the requests. Runs: sequential, then open-loop at
200 and 500 requests/s. The client shares the machine's cores with the picker, so at the higher
rate the achieved rate is reported beside the target. Writes bench/results/<date>-epp-picker.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))

import fleets
import provenance
from eppharness import Stream, pick_of, request_body, request_headers, response_headers
from routing import _cpu_seconds

FLEET = [f"http://10.0.0.{n}:8000" for n in range(1, 9)]


def bodies(count: int) -> list[bytes]:
    """~4 KB completions in 16 prefix groups: a shared 3.5 KB document and a short question."""
    docs = [f"document {g}: " + f"shared context line {g} " * 160 for g in range(16)]
    return [
        json.dumps({"model": "m", "prompt": docs[n % 16] + f" question {n}?", "max_tokens": 16}).encode()
        for n in range(count)
    ]


async def one(channel: grpc.aio.Channel, body: bytes) -> float:
    """One request's stream; the pick latency in seconds."""
    stream = Stream(channel)
    await stream.send(request_headers())
    sent = time.perf_counter()
    await stream.send(request_body(body))
    pick_of(await stream.read())
    picked = time.perf_counter() - sent
    await stream.read()  # the body handed back
    await stream.send(response_headers(200, end=True))
    await stream.read()
    await stream.end()
    return picked


def _summary(latencies: list[float], cpu: float, seconds: float, target: float | None) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "target_rps": target,
        "requests": len(ordered),
        "achieved_rps": round(len(ordered) / seconds, 1),
        "pick_ms_p50": round(1000 * ordered[len(ordered) // 2], 3),
        "pick_ms_p99": round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "pick_ms_mean": round(1000 * statistics.fmean(ordered), 3),
        "picker_cpu_ms_per_request": round(1000 * cpu / max(1, len(ordered)), 3),
    }


async def sequential(channel: grpc.aio.Channel, target: fleets.RouterUnderTest, work: list[bytes]) -> dict[str, Any]:
    start_cpu, started = _cpu_seconds(target) or 0.0, time.perf_counter()
    latencies = [await one(channel, body) for body in work]
    cpu = (_cpu_seconds(target) or 0.0) - start_cpu
    return _summary(latencies, cpu, time.perf_counter() - started, None)


async def open_loop(
    channel: grpc.aio.Channel, target: fleets.RouterUnderTest, work: list[bytes], rate: float, seconds: float
) -> dict[str, Any]:
    """Start requests on a fixed schedule (not waiting for earlier ones) for ``seconds``."""
    count = int(rate * seconds)
    start_cpu, started = _cpu_seconds(target) or 0.0, time.perf_counter()
    tasks = []
    for n in range(count):
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(channel, work[n % len(work)])))
    latencies = list(await asyncio.gather(*tasks))
    elapsed = time.perf_counter() - started
    cpu = (_cpu_seconds(target) or 0.0) - start_cpu
    return _summary(latencies, cpu, elapsed, rate)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch)
        grpc_port, admin_port = fleets.free_port(), fleets.free_port()
        argv = [fleets.PYTHON, "-m", "warmstart.cli", "router", "--mode", "epp", "--host", fleets.HOST]
        argv += ["--grpc-port", str(grpc_port), "--admin-port", str(admin_port), "--strategy", "prefixaware"]
        argv += ["--backends", ",".join(FLEET), "--log-level", "WARNING"]
        proc = fleets.spawn("picker", argv, logs)
        target = fleets.RouterUnderTest("warmstart picker", "", "warmstart", proc, logs / "none", FLEET)
        try:
            async with aiohttp.ClientSession() as session:
                await fleets.wait_http(session, f"http://{fleets.HOST}:{admin_port}/router/status", proc)
            async with grpc.aio.insecure_channel(f"{fleets.HOST}:{grpc_port}") as channel:
                work = bodies(max(args.requests, 500))
                for body in work[:200]:  # warm up
                    await one(channel, body)
                runs = [await sequential(channel, target, work[: args.requests])]
                for rate in (200.0, 500.0):
                    runs.append(await open_loop(channel, target, work, rate, args.seconds))
        finally:
            proc.stop()
    return {"fleet": len(FLEET), "strategy": "prefixaware", "body_bytes": len(work[0]), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of each open-loop run")
    args = parser.parse_args()
    started = provenance.start()
    payload = asyncio.run(main_async(args))
    for run in payload["runs"]:
        print(json.dumps(run))
    print(provenance.write("epp-picker", started, payload))


if __name__ == "__main__":
    main()
