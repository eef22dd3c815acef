"""The endpoint picker alone: pick latency and CPU per pick, driven over gRPC as a gateway drives it.

    python bench/epp_picker.py [--requests 2000] [--seconds 10] [--modes buffered full]

``warmstart router --mode epp`` runs as its own process (prefixaware, 12 replica addresses that
nothing serves: the picker never connects to them). A Python gRPC client plays the gateway's side
of the ext_proc stream for each request: ~2,048-token chat requests (about 8 KB of messages) in 32
prefix groups. Modes:

* ``buffered``: what warmstart's rendered gateway sends: the request headers (answered at once),
  the body in one BUFFERED message (answered with the pick), the response headers, then the
  stream is half-closed and reset, as Envoy 1.40 ends a stream whose response body it does not send;
* ``full``: GIE's reference configuration: the body FULL_DUPLEX_STREAMED (the pick answers the held
  headers, the body is handed back), the response headers, four SSE events each way.

The *pick latency* is from sending the body's last piece to receiving the pick: what a gateway
waits before it can connect upstream. CPU per pick is the picker process's on-CPU time (Linux
schedstat) over the requests; ``picks_per_cpu_second`` is its inverse, the rate one core sustains.
Runs per mode: sequential, then open-loop at 500 and 1,000 requests/s. The client shares the
machine's cores with the picker, so the achieved rate is reported beside the target. Writes
bench/results/<date>-epp-picker.json.
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
from eppharness import (
    BUFFERED,
    NO_BODY,
    Stream,
    pick_of,
    request_body,
    request_headers,
    response_body,
    response_headers,
)
from routing import _cpu_seconds

FLEET = [f"http://10.0.0.{n}:8000" for n in range(1, 13)]
GROUPS = 32
#: the response of the ``full`` mode: four SSE events, the last one ends it
EVENTS = [b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'] * 3 + [b"data: [DONE]\n\n"]


def bodies(count: int) -> list[bytes]:
    """~2,048-token chat requests (~8 KB) in 32 prefix groups: a shared system prompt and a short question."""
    systems = [
        " ".join(f"group {g} system prompt sentence {i} about routing." for i in range(165)) for g in range(GROUPS)
    ]
    return [
        json.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": systems[n % GROUPS]},
                    {"role": "user", "content": f"question {n}: " + "why " * 20},
                ],
                "max_tokens": 16,
                "stream": True,
            }
        ).encode()
        for n in range(count)
    ]


async def one(channel: grpc.aio.Channel, body: bytes, mode: str = "buffered") -> float:
    """One request's stream in ``mode``; the pick latency in seconds."""
    stream = Stream(channel)
    if mode == "buffered":
        await stream.send(request_headers(mode=BUFFERED, response_mode=NO_BODY))
        await stream.read()  # the headers go on unchanged
        sent = time.perf_counter()
        await stream.send(request_body(body))
        pick_of(await stream.read(), "request_body")
        picked = time.perf_counter() - sent
        await stream.send(response_headers(200))
        await stream.read()
        await stream.call.done_writing()  # the response's end: Envoy half-closes and resets
        stream.cancel()
        return picked
    await stream.send(request_headers())
    sent = time.perf_counter()
    await stream.send(request_body(body))
    pick_of(await stream.read())
    picked = time.perf_counter() - sent
    await stream.read()  # the body handed back
    await stream.send(response_headers(200))
    await stream.read()
    for index, event in enumerate(EVENTS):
        await stream.send(response_body(event, end=index == len(EVENTS) - 1))
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
        "picks_per_cpu_second": round(len(ordered) / cpu, 1) if cpu else None,
    }


async def sequential(
    channel: grpc.aio.Channel, target: fleets.RouterUnderTest, work: list[bytes], mode: str
) -> dict[str, Any]:
    start_cpu, started = _cpu_seconds(target) or 0.0, time.perf_counter()
    latencies = [await one(channel, body, mode) for body in work]
    cpu = (_cpu_seconds(target) or 0.0) - start_cpu
    return _summary(latencies, cpu, time.perf_counter() - started, None)


async def open_loop(
    channel: grpc.aio.Channel,
    target: fleets.RouterUnderTest,
    work: list[bytes],
    rate: float,
    seconds: float,
    mode: str,
) -> dict[str, Any]:
    """Start requests on a fixed schedule (not waiting for earlier ones) for ``seconds``."""
    count = int(rate * seconds)
    start_cpu, started = _cpu_seconds(target) or 0.0, time.perf_counter()
    tasks = []
    for n in range(count):
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(channel, work[n % len(work)], mode)))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    latencies = [o for o in outcomes if isinstance(o, float)]
    elapsed = time.perf_counter() - started
    cpu = (_cpu_seconds(target) or 0.0) - start_cpu
    return _summary(latencies, cpu, elapsed, rate) | {"failed": len(outcomes) - len(latencies)}


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
                runs = []
                for mode in args.modes:
                    runs.append({"mode": mode} | await sequential(channel, target, work[: args.requests], mode))
                    for rate in (500.0, 1000.0):
                        runs.append({"mode": mode} | await open_loop(channel, target, work, rate, args.seconds, mode))
        finally:
            proc.stop()
    return {"fleet": len(FLEET), "groups": GROUPS, "strategy": "prefixaware", "body_bytes": len(work[0]), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of each open-loop run")
    parser.add_argument("--modes", nargs="+", default=["buffered", "full"], choices=["buffered", "full"])
    args = parser.parse_args()
    started = provenance.start()
    payload = asyncio.run(main_async(args))
    for run in payload["runs"]:
        print(json.dumps(run))
    print(provenance.write("epp-picker", started, payload))


if __name__ == "__main__":
    main()
