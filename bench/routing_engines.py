"""Routing from engine truth, measured: KV events + engine load vs the text index vs SGLang, at 1, 2 and 4 routers.

    nice python bench/routing_engines.py                  # 3 runs of each (router, count, workload); ~1 hour here
    nice python bench/routing.py --fleet events           # the same (bench/routing.py passes its other flags on)
    nice python bench/routing_engines.py --runs 1 --counts 2 --workloads shared_prefix

Fleet: 8 ``warmstart sim`` replicas that tokenize with a real tokenizer (``warmstart.sim.tinytokenizer``)
and publish vLLM's KV events (``--kv-events-config``, replay socket on). Routers, each as N processes
behind random spreading (N = 1, 2, 4): ``events`` (``prefixaware`` with ``kvEvents``: the same
tokenizer, the engines' events and load), ``text`` (``prefixaware``, the text index, default knobs) and
``sglang`` (SGLang ``cache_aware``, default knobs); ``random`` (1 router) for the p50 goal. The
workloads and their sizes are bench/routing.py's quick ones; every figure is the median of ``--runs``
runs with its range. Two more measurements:

* **disagreement**: two routers get the same new prefix at the same moment (under background load)
  and each sends it on; the share of such pairs that reach different replicas;
* **CPU per request**: the router process's CPU time per request (``/proc``), one request at a time,
  for a 2,048-token (128-block) chat prompt, tokenization included, against an instant replica.

Prints the goals table and writes ``--out``/routing-engines.{json,md}; commit the JSON under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleets
import loading
import reporting
import routing
from warmstart.sim import tinytokenizer, workloads

FLEET = routing.FLEET
#: "-sync": the router processes share their picks and in-flight counts (peer sync; docs/router.md)
KINDS = ("events", "text", "sglang", "events-sync", "text-sync")


def router_config(kind: str, cfg: dict[str, Any], copies: int) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "indexCapacityBlocks": int(cfg["cache_tokens"]) * 4 // 256,
        "maxConcurrentRequests": 64 // copies,
    }
    if kind == "events":
        extra.update(
            kvEvents=True,
            kvEventsPort=cfg["events_offset"],
            kvEventsReplayPort=cfg["replay_offset"],
            kvEventsPortsRelative=True,
            tokenizerDir=cfg["tokenizer_dir"],
            engineLoadIntervalSeconds=0.05,
        )
    return extra


async def start(
    session: aiohttp.ClientSession, kind: str, copies: int, urls: list[str], cfg: dict[str, Any], logs: Path
) -> fleets.RouterUnderTest:
    if kind == "sglang":
        target = await fleets.start_sglang(session, "cache_aware", urls, logs)
        for _ in range(copies - 1):
            target.peers.append(await fleets.start_sglang(session, "cache_aware", urls, logs))
    else:
        strategy = "random" if kind == "random" else "prefixaware"
        base = kind.removesuffix("-sync")
        extra = router_config(base, cfg, copies)
        flags: list[list[str]] = (
            fleets.sync_args(copies, logs) if kind.endswith("-sync") and copies > 1 else [[] for _ in range(copies)]
        )
        target = await fleets.start_warmstart(session, strategy, urls, logs, extra, args=flags[0])
        for more in flags[1:]:
            target.peers.append(await fleets.start_warmstart(session, strategy, urls, logs, extra, args=more))
    target.label = f"{kind} x{copies}"
    if kind.endswith("-sync"):
        await asyncio.sleep(1.0)  # the peers' first heartbeats: every router has heard from every other
    if kind.startswith("events"):
        await asyncio.sleep(0.5)  # subscriptions reach the publishers
    return target


async def disagreement(
    session: aiohttp.ClientSession, target: fleets.RouterUnderTest, cfg: dict[str, Any], probes: int
) -> float:
    """Share of new prefixes that two routers, given them at the same moment, send to different replicas."""
    assert len(target.urls) >= 2
    rng = random.Random(11)
    background = workloads.shared_prefix(
        groups=int(cfg["groups"]), per_group=int(cfg["per_group"]), rate=float(cfg["rate"]) * 0.7, output_tokens=64
    )
    load = asyncio.create_task(loading.open_loop(session, target.urls, background, float(cfg["time_scale"]), []))
    await asyncio.sleep(2.0)
    differ = 0
    for _ in range(probes):
        body = {"model": "sim-llm", "prompt": workloads.words(rng, 600), "max_tokens": 1}

        async def send(url: str, body: dict[str, Any] = body) -> str:
            async with session.post(url + "/v1/completions", json=body) as response:
                return loading._replica_of((await response.json()).get("id", "")) or "?"

        first, second = await asyncio.gather(send(target.urls[0]), send(target.urls[1]))
        differ += first != second
        await asyncio.sleep(0.1)
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)
    return differ / probes


async def cpu_per_request(session: aiohttp.ClientSession, kind: str, cfg: dict[str, Any], logs: Path) -> float:
    """Router CPU ms per request, sequential, 2,048-token chat prompt (128 blocks of 16), instant replica."""
    port = fleets.free_port()
    sim_args = ["--time-scale", "0", "--tokenizer", str(cfg["tokenizer_dir"])]
    sim = fleets.spawn("sim-instant", fleets.sim_argv(1, port, sim_args, "t"), logs)
    url = f"http://{fleets.HOST}:{port}"
    target = None
    try:
        await fleets.wait_http(session, url + "/health", sim)
        target = await start(session, kind, 1, [url], {**cfg, "events_offset": 1, "replay_offset": 2}, logs)
        rng = random.Random(5)
        body = {
            "model": "sim-llm",
            "messages": [{"role": "system", "content": workloads.words(rng, 1900)}, {"role": "user", "content": "x"}],
            "max_tokens": 1,
        }
        for _ in range(50):
            async with session.post(target.url + "/v1/chat/completions", json=body) as response:
                await response.read()
        best = float("inf")
        for _ in range(3):
            before = routing._cpu_seconds(target) or 0.0
            count = 300
            for _ in range(count):
                async with session.post(target.url + "/v1/chat/completions", json=body) as response:
                    await response.read()
            best = min(best, ((routing._cpu_seconds(target) or 0.0) - before) * 1000 / count)
        return best
    finally:
        if target is not None:
            target.stop()
        sim.stop()


def median_range(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(rows: dict[str, dict[str, list[reporting.Row]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for workload, by_target in rows.items():
        for label, runs in by_target.items():
            out.setdefault(workload, {})[label] = {
                "hit_ratio": median_range([r.hit_ratio for r in runs]),
                "ttft_p50_ms": median_range([r.ttft_p50_ms for r in runs]),
                "ttft_p99_ms": median_range([r.ttft_p99_ms for r in runs]),
                "engine_ttft_p50_ms": median_range([r.engine_ttft_p50_ms for r in runs]),
                "engine_ttft_p99_ms": median_range([r.engine_ttft_p99_ms for r in runs]),
                "max_mean_share": median_range([r.max_mean_share for r in runs]),
                "errors": sum(r.errors for r in runs),
            }
    return out


def goals(summary: dict[str, Any], counts: list[int], cpu: dict[str, float]) -> list[list[str]]:
    """The router goals table: one line per goal and router count, with the measured medians."""
    lines: list[list[str]] = []

    def med(workload: str, label: str, figure: str) -> float:
        cell = summary.get(workload, {}).get(label)
        return float(cell[figure]["median"]) if cell else float("nan")

    for n in (c for c in counts if c > 1):
        deltas = [med(w, f"events x{n}", "hit_ratio") - med(w, "events x1", "hit_ratio") for w in summary]
        worst = min(deltas, key=lambda d: -abs(d)) if deltas else float("nan")
        lines.append([f"hit ratio, {n} routers vs 1", "within 0.01", f"{worst:+.3f}", _ok(abs(worst) <= 0.01)])
    for n in counts:
        label = f"events x{n}"
        high = [med(w, label, "max_mean_share") for w in summary if "@low" not in w]
        low = [med(w, label, "max_mean_share") for w in summary if "@low" in w]
        if high:
            lines.append(
                [f"max/mean share, high load, {n} routers", "<= 1.15", f"{max(high):.2f}", _ok(max(high) <= 1.15)]
            )
        if low:
            lines.append([f"max/mean share, low load, {n} routers", "<= 1.3", f"{max(low):.2f}", _ok(max(low) <= 1.3)])
        ratios = [med(w, label, "engine_ttft_p99_ms") / med(w, f"sglang x{n}", "engine_ttft_p99_ms") for w in summary]
        ratios = [r for r in ratios if r == r]
        if ratios:
            lines.append(
                [f"p99 TTFT vs SGLang, {n} routers", "<= 1.00x", f"{max(ratios):.2f}x", _ok(max(ratios) <= 1.0)]
            )
    for workload in summary:
        if workload.startswith("shared_prefix") and "random x1" in summary[workload]:
            ratio = med(workload, "events x2", "engine_ttft_p50_ms") / med(workload, "random x1", "engine_ttft_p50_ms")
            lines.append([f"p50 TTFT vs random, {workload}, 2 routers", "<= 0.3x", f"{ratio:.2f}x", _ok(ratio <= 0.3)])
    for kind, ms in cpu.items():
        goal = "<= 0.3 ms" if kind == "events" else "-"
        lines.append(
            [f"CPU per request, 128 blocks, {kind}", goal, f"{ms:.3f} ms", _ok(ms <= 0.3) if kind == "events" else "-"]
        )
    return lines


async def sync_cost(session: aiohttp.ClientSession, target: fleets.RouterUnderTest) -> dict[str, float]:
    """The peer sync's CPU over every router process of ``target``, per request they routed (their own metrics)."""
    cpu = apply = requests = dropped = 0.0
    for member in target.members:
        async with session.get(member.internals + "/metrics") as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "warmstart_router_peer_sync_cpu_seconds_total":
                    cpu += sample.value
                elif sample.name == "warmstart_router_peer_apply_cpu_seconds_total":
                    apply += sample.value
                elif sample.name == "warmstart_router_requests_total":
                    requests += sample.value
                elif sample.name == "warmstart_router_peer_messages_dropped_total":
                    dropped += sample.value
    return {
        "cpu_seconds": cpu,
        "requests": requests,
        "dropped": dropped,
        "cpu_ms_per_request": 1000 * cpu / requests if requests else float("nan"),
        "apply_cpu_ms_per_request": 1000 * apply / requests if requests else float("nan"),
    }


def sync_goals(summary: dict[str, Any], counts: list[int], cost: dict[str, dict[str, float]]) -> list[list[str]]:
    """The peer-sync goals: N synced routers against one router of the same kind, and against SGLang at N."""
    lines: list[list[str]] = []

    def med(workload: str, label: str, figure: str) -> float:
        cell = summary.get(workload, {}).get(label)
        return float(cell[figure]["median"]) if cell else float("nan")

    for base in ("events", "text"):
        labels = {n: f"{base}-sync x{n}" if n > 1 else f"{base} x1" for n in {1, *counts}}
        if not any(labels[n] in by for by in summary.values() for n in counts if n > 1):
            continue
        for n in (c for c in counts if c > 1):
            deltas = [med(w, labels[n], "hit_ratio") - med(w, labels[1], "hit_ratio") for w in summary]
            deltas = [d for d in deltas if d == d]
            worst = min(deltas, key=lambda d: -abs(d)) if deltas else float("nan")
            lines.append(
                [
                    f"{base}, synced: hit ratio, {n} routers vs 1",
                    "within 0.01",
                    f"{worst:+.3f}",
                    _ok(abs(worst) <= 0.01),
                ]
            )
        for n in counts:
            high = [med(w, labels[n], "max_mean_share") for w in summary if "@low" not in w]
            low = [med(w, labels[n], "max_mean_share") for w in summary if "@low" in w]
            high, low = [x for x in high if x == x], [x for x in low if x == x]
            if high:
                lines.append(
                    [
                        f"{base}: max/mean share, high load, {n} routers",
                        "<= 1.2",
                        f"{max(high):.2f}",
                        _ok(max(high) <= 1.2),
                    ]
                )
            if low:
                lines.append(
                    [
                        f"{base}: max/mean share, low load, {n} routers",
                        "<= 1.3",
                        f"{max(low):.2f}",
                        _ok(max(low) <= 1.3),
                    ]
                )
            # engine TTFT: on a loaded machine the client's figure measures the machine (routers waiting for CPU)
            ratios = [
                med(w, labels[n], "engine_ttft_p99_ms") / med(w, f"sglang x{n}", "engine_ttft_p99_ms") for w in summary
            ]
            ratios = [r for r in ratios if r == r]
            if ratios:
                lines.append(
                    [
                        f"{base}: p99 TTFT vs SGLang, {n} routers",
                        "<= 1.00x",
                        f"{max(ratios):.2f}x",
                        _ok(max(ratios) <= 1.0),
                    ]
                )
    for label, cell in sorted(cost.items()):
        ms = float(cell["median"])
        lines.append([f"sync CPU per request, {label} (all routers)", "<= 0.05 ms", f"{ms:.4f} ms", _ok(ms <= 0.05)])
    return lines


def _ok(met: bool) -> str:
    return "met" if met else "missed"


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    logs = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = routing.plan(True, args.time_scale)
    cfg["load_basis"] = "hit"
    cfg["random_hit_ratio"] = round(routing.offline_random_hit_ratio(cfg), 4)
    cfg["rate"] = round(routing.arrival_rate(cfg), 2)
    tokdir = Path(tempfile.mkdtemp(prefix="warmstart-bench-tok-"))
    cfg["tokenizer_dir"] = str(tinytokenizer.build(tokdir))
    base, events, replay = fleets.free_block(FLEET), fleets.free_block(FLEET), fleets.free_block(FLEET)
    cfg["events_offset"], cfg["replay_offset"] = events - base, replay - base
    kv = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events}"}
    kv["replay_endpoint"] = f"tcp://*:{replay}"
    sim_args = ["--time-scale", str(cfg["time_scale"]), "--cache-tokens", str(cfg["cache_tokens"])]
    sim_args += ["--tokenizer", cfg["tokenizer_dir"], "--kv-events-config", json.dumps(kv)]
    fleet = fleets.spawn("sim-fleet-events", fleets.sim_argv(FLEET, base, sim_args), logs)
    urls = [f"http://{fleets.HOST}:{base + i}" for i in range(FLEET)]
    if args.no_workloads:
        args.workloads = []
    # a synced kind stands for its kind at 2+ routers; at 1 router there is nothing to sync
    targets = [
        (kind, n)
        for n in args.counts
        for kind in args.kinds
        if not (kind.endswith("-sync") and n == 1) and not (n > 1 and f"{kind}-sync" in args.kinds)
    ]
    if any(w.startswith("shared_prefix") for w in args.workloads):
        targets.append(("random", 1))
    rows: dict[str, dict[str, list[reporting.Row]]] = {}
    sync_costs: dict[str, list[float]] = {}
    started = time.monotonic()
    print(f"plan: {json.dumps(cfg)}; targets {targets}; workloads {args.workloads}; runs {args.runs}", flush=True)
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "commit": _commit(),
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "config": cfg,
        "runs": [],
    }
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
    ) as session:
        try:
            for url in urls:
                await fleets.wait_http(session, url + "/health", fleet)
            for run in range(args.runs):
                for workload in args.workloads:
                    for kind, n in targets:  # interleaved: machine noise hits every router alike
                        if kind == "random" and not workload.startswith("shared_prefix"):
                            continue
                        target = await start(session, kind, n, urls, cfg, logs)
                        try:
                            row = await routing.run_workload(session, target, workload, cfg, urls, urls)
                            cost = await sync_cost(session, target) if kind.endswith("-sync") and n > 1 else None
                        finally:
                            target.stop()
                        rows.setdefault(workload, {}).setdefault(target.label, []).append(row)
                        entry = {"run": run, "workload": workload, "router": target.label, **_row(row)}
                        if cost is not None:
                            entry["sync"] = cost
                            sync_costs.setdefault(target.label, []).append(cost["cpu_ms_per_request"])
                        result["runs"].append(entry)
                        (out / "routing-engines.partial.json").write_text(json.dumps(result, indent=1))
                        print(
                            f"[{time.monotonic() - started:6.0f}s] run {run} {workload:18s} {target.label:10s} "
                            f"hit={row.hit_ratio:.3f} engine p50={row.engine_ttft_p50_ms:.0f} "
                            f"p99={row.engine_ttft_p99_ms:.0f} "
                            f"share={row.max_mean_share:.2f} errors={row.errors}",
                            flush=True,
                        )
            disagree: dict[str, list[float]] = {}
            if 2 in args.counts and args.probes:
                for run in range(args.runs):
                    for kind in args.kinds:
                        target = await start(session, kind, 2, urls, cfg, logs)
                        try:
                            share = await disagreement(session, target, cfg, args.probes)
                        finally:
                            target.stop()
                        disagree.setdefault(kind, []).append(share)
                        print(f"disagreement {kind} x2 run {run}: {share:.3f}", flush=True)
        finally:
            fleet.stop()
        cpu = {}
        if not args.skip_cpu:
            for kind in ("events", "text"):
                cpu[kind] = await cpu_per_request(session, kind, cfg, logs)
                print(f"CPU per request {kind}: {cpu[kind]:.3f} ms", flush=True)
    summary = summarize(rows)
    result.update(
        summary=summary,
        sync_cpu_ms_per_request={label: median_range(v) for label, v in sync_costs.items()},
        disagreement={k: median_range(v) for k, v in disagree.items()},
        cpu_ms_per_request=cpu,
        seconds=round(time.monotonic() - started),
        load_average_at_end=[round(x, 1) for x in os.getloadavg()],
    )
    table = goals(summary, args.counts, cpu) + sync_goals(summary, args.counts, result["sync_cpu_ms_per_request"])
    result["goals"] = table
    (out / "routing-engines.json").write_text(json.dumps(result, indent=1))
    report = render(summary, result["disagreement"], table)
    (out / "routing-engines.md").write_text(report)
    print(report)
    return 0


def _commit() -> str:
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def _row(row: reporting.Row) -> dict[str, Any]:
    keep = ("requests", "errors", "hit_ratio", "ttft_p50_ms", "ttft_p99_ms", "engine_ttft_p50_ms", "engine_ttft_p99_ms")
    keep += ("max_mean_share",)
    return {key: getattr(row, key) for key in keep} | {"per_replica": row.per_replica}


def render(summary: dict[str, Any], disagree: dict[str, Any], table: list[list[str]]) -> str:
    lines = ["| goal | target | measured (median) | |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(line) + " |" for line in table]
    lines += [
        "",
        "| workload | router | hit ratio | p50 TTFT ms | p99 TTFT ms | max/mean share |",
        "|---|---|---|---|---|---|",
    ]
    for workload, by_target in summary.items():
        for label, cell in sorted(by_target.items()):
            figures = [cell[k] for k in ("hit_ratio", "ttft_p50_ms", "ttft_p99_ms", "max_mean_share")]
            text = [
                f"{f['median']:.3f} ({f['min']:.3f}-{f['max']:.3f})"
                if i in (0, 3)
                else f"{f['median']:.0f} ({f['min']:.0f}-{f['max']:.0f})"
                for i, f in enumerate(figures)
            ]
            lines.append(f"| {workload} | {label} | " + " | ".join(text) + " |")
    if disagree:
        lines += ["", "| two routers, same new prefix at once | disagree (median, range) |", "|---|---|"]
        for kind, cell in disagree.items():
            lines.append(f"| {kind} x2 | {cell['median']:.3f} ({cell['min']:.3f}-{cell['max']:.3f}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument(
        "--workloads", nargs="+", default=["shared_prefix", "shared_prefix@low", "multi_turn", "multi_turn@low"]
    )
    p.add_argument("--probes", type=int, default=100, help="new prefixes sent to two routers at once (0: skip)")
    p.add_argument("--time-scale", type=float, default=0.25)
    p.add_argument("--skip-cpu", action="store_true")
    p.add_argument("--no-workloads", action="store_true", help="only the disagreement and CPU measurements")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
