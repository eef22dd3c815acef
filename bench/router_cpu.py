"""Router CPU per request, this tree against another commit's router, in alternating rounds (the load-robust figure).

    python bench/router_cpu.py --baseline-ref REF [--rounds 30] [--requests 300]

One trivial simulated replica (time scale 0); two ``warmstart router`` processes in front of it,
this tree's and the one of ``--baseline-ref`` (extracted with ``git archive``). Each round sends
``--requests`` sequential 1-token completions through each router, alternating which goes first,
and reads each router's on-CPU time from Linux schedstat: CPU per request per router per round,
and the ratio this/baseline per round. Reports the median ratio (robust to load bursts, which hit
both routers of a round alike) and writes bench/results/<date>-router-cpu.json (one entry per run).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleets
from routing import _cpu_seconds, _sequential


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    body = {"model": "sim-llm", "prompt": "hello " * 80, "max_tokens": 1}
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch) / "logs"
        port = fleets.free_port()
        sim = fleets.spawn("sim", fleets.sim_argv(1, port, ["--time-scale", "0"], "t"), logs)
        backend = f"http://{fleets.HOST}:{port}"
        targets: list[fleets.RouterUnderTest] = []
        async with aiohttp.ClientSession() as session:
            try:
                await fleets.wait_http(session, backend + "/health", sim)
                targets.append(await fleets.start_warmstart(session, "prefixaware", [backend], logs))
                before = fleets.checkout(args.baseline_ref, Path(scratch))
                targets.append(await fleets.start_warmstart(session, "prefixaware", [backend], logs, None, before))
                for target in targets:
                    await _sequential(session, target.url + "/v1/completions", body, 200)  # warm up
                per_request: list[list[float]] = [[], []]
                for round_ in range(args.rounds):
                    order = [0, 1] if round_ % 2 == 0 else [1, 0]
                    for index in order:
                        target = targets[index]
                        start = _cpu_seconds(target) or 0.0
                        done = await _sequential(session, target.url + "/v1/completions", body, args.requests)
                        per_request[index].append(((_cpu_seconds(target) or 0.0) - start) * 1000 / max(1, done))
            finally:
                for target in targets:
                    target.stop()
                sim.stop()
    ratios = [after / before for after, before in zip(per_request[0], per_request[1], strict=True)]
    return {
        "this_ms_per_request": per_request[0],
        "baseline_ms_per_request": per_request[1],
        "ratios": ratios,
        "median_this_ms": statistics.median(per_request[0]),
        "median_baseline_ms": statistics.median(per_request[1]),
        "median_ratio": statistics.median(ratios),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline-ref", required=True)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--requests", type=int, default=300)
    args = p.parse_args()
    load_before = os.getloadavg()
    result = asyncio.run(main_async(args))
    repo = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    out = repo / "bench" / "results" / f"{datetime.date.today()}-router-cpu.json"
    runs = json.loads(out.read_text()) if out.exists() else []
    runs.append(
        {
            "command": " ".join(["python", *sys.argv]),
            "commit": commit.stdout.strip(),
            "baseline_ref": args.baseline_ref,
            "cpus": os.cpu_count(),
            "load_average": {"start": load_before, "end": os.getloadavg()},
            **result,
        }
    )
    out.write_text(json.dumps(runs, indent=2) + "\n")
    print(
        f"CPU per request: this {result['median_this_ms']:.3f} ms, baseline {result['median_baseline_ms']:.3f} ms,"
        f" median ratio x{result['median_ratio']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
