"""Routing benchmark: warmstart's strategies vs the real SGLang router vs an ideal bound, on simulated vLLM.

    python bench/routing.py --quick      # every section at small sizes (~10 minutes on a loaded 2-core machine)
    python bench/routing.py              # full run: more routers, bigger workloads, the scale event
    python bench/routing.py --fleet llamacpp   # real engines instead (llama.cpp, bench/routing_llamacpp.py)
    python bench/routing.py --fleet events     # KV events + engine load vs text vs SGLang, 1/2/4 routers, the goals
                                               # table (bench/routing_engines.py, which takes the other flags)
    python bench/routing.py --fleet gateway    # Envoy + the endpoint picker vs the proxy vs SGLang, added latency
                                               # and CPU per process, the goals (bench/routing_gateway.py)

Fleet: 8 simulated replicas (a 9th joins in the scale event), one process, time-scaled. The
ideal bound is one replica with the fleet's total cache, prefill compute and slots, called
directly. Workloads: generated-shared-prefix (SGLang's definition), multi-turn chat, a hot
prefix (one group = 50% of traffic) and a scale event (8 -> 9 -> 7 replicas). Hit ratios come
from the replicas' own vLLM counters; TTFT is measured at the client (and in the engine, without
the machine's path delay). Each workload runs at high load and at low load (``@low``: mean
in-flight about 1 per replica), against this router, the router of ``--baseline-ref``, 2 and 4
router processes behind random spreading, and SGLang cache_aware with default and tight guard
settings. Router overhead is the latency added over calling a trivial replica directly, at 200
and 500 requests/s, and the router's CPU per request.
Writes bench/out/routing.md, routing.json and PNG plots; with ``--results-name NAME`` also
bench/results/<date>-NAME.json (routing.json plus the command, the commit and the load average).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleets
import loading
import provenance
import reporting
import routing_llamacpp
from warmstart.sim import workloads
from warmstart.sim.engine import EngineParams

FLEET = 8
PROMPT_TOKENS = 2048 + 128


def plan(quick: bool, scale: float) -> dict[str, object]:
    groups = 32 if quick else 64
    return {
        "groups": groups,
        "per_group": 8 if quick else 16,
        "scale_per_group": 12 if quick else 24,
        "rounds": 5,
        "cache_tokens": groups * 2048 // 2,  # one replica holds half the groups' system prompts
        "time_scale": scale,
        "overhead_seconds": 3.0 if quick else 8.0,
        # low load: mean in-flight about 1 per replica (short replies, ~1 s each, 8 requests/s)
        "low_rate": 8.0,
        "low_output_tokens": 32,
        # chat at low load: 64 users with 21 s think time (mean in-flight about 1 per replica), and
        # "low16", the former setting (16 users, 2 s), kept for comparison: with 16 sticky users on 8
        # replicas one replica with 3 users is already 1.5x the mean share, whatever the policy
        "chat_users": {"low": 64, "low16": 16, "high": 96},
        "chat_think_s": {"low": 21.0, "low16": 2.0, "high": 2.0},
        "chat_spread_s": {"low": 20.0, "low16": 5.0, "high": 5.0},
    }


#: The router before the request-share balance change (in-flight floor of 8, no request-share bound):
#: run from its own source in the same run, as "warmstart prefixaware before".
BASELINE_REF = "9738fd3"

#: Workloads; "@low" = mean in-flight about 1 per replica, otherwise the high-load (70%) setting;
#: "multi_turn@low16" is the former low-load chat setting (16 users), kept for comparison.
WORKLOADS = [
    "shared_prefix",
    "multi_turn",
    "hot_prefix",
    "shared_prefix@low",
    "multi_turn@low",
    "multi_turn@low16",
    "hot_prefix@low",
    "scale_event",
]


def routers_for(quick: bool, with_sglang: bool) -> list[str]:
    # router replicas behind random spreading: they must agree on homes without shared state
    names = [
        "warmstart prefixaware",
        "warmstart prefixaware before",
        "warmstart prefixaware x2",
        "warmstart prefixaware x4",
        "warmstart prefixaware prefill",  # prefillAware: p99 TTFT for a single router (docs/router.md)
    ]
    if not quick:
        names[:0] = ["warmstart random", "warmstart roundrobin", "warmstart leastoutstanding", "warmstart session"]
    if with_sglang:
        names += ["sglang cache_aware", "sglang cache_aware guard"]
        if not quick:
            names.append("sglang random")
    return names if quick else [*names, "ideal"]


def offline_random_hit_ratio(cfg: dict[str, object]) -> float:
    """Prefix hit ratio of uniformly random routing, replayed offline through the fleet's caches."""
    import random

    from warmstart.sim.engine import BlockCache, count_tokens, prompt_blocks
    from warmstart.sim.server import render_prompt

    params = EngineParams(cache_tokens=int(cfg["cache_tokens"]))  # type: ignore[call-overload]
    caches = [BlockCache(params.cache_blocks) for _ in range(FLEET)]
    rng = random.Random(0)
    queries = hits = 0
    for request in workloads.shared_prefix(
        groups=int(cfg["groups"]),
        per_group=int(cfg["per_group"]),  # type: ignore[call-overload]
        rate=1.0,
    ):
        prompt = render_prompt(request.body)
        tokens = count_tokens(prompt)
        hit = caches[rng.randrange(FLEET)].lookup_and_fill(prompt_blocks(prompt, params.block_tokens))
        queries += tokens
        hits += min(hit * params.block_tokens, tokens - 1)
    return hits / queries


def arrival_rate(cfg: dict[str, object]) -> float:
    """Requests per model second for ~70% fleet load (see --load-basis)."""
    cold = workloads.rate_for_load(0.7, FLEET, EngineParams(), PROMPT_TOKENS)
    if cfg["load_basis"] == "cold":
        return cold
    return cold / (1.0 - float(cfg["random_hit_ratio"]))  # type: ignore[arg-type]


async def run_workload(
    session: aiohttp.ClientSession,
    target: fleets.RouterUnderTest,
    workload: str,
    cfg: dict[str, object],
    fleet_urls: list[str],
    measure_urls: list[str],
) -> reporting.Row:
    scale = float(cfg["time_scale"])  # type: ignore[arg-type]
    base, _, load = workload.partition("@")
    low = load.startswith("low")
    rate = float(cfg["low_rate" if low else "rate"])  # type: ignore[arg-type]
    await loading.reset_replicas(session, measure_urls)
    before = await loading.replica_counters(session, measure_urls)
    spills_before = await _spills(session, target)
    moved: dict[str, float] = {}
    stop = asyncio.Event()
    peaks = asyncio.create_task(loading.peak_replica_load(session, measure_urls, stop))
    if base == "multi_turn":
        setting = load or "high"
        users = workloads.multi_turn(
            users=int(cfg["chat_users"][setting]),  # type: ignore[index]
            rounds=int(cfg["rounds"]),  # type: ignore[call-overload]
            think_s=float(cfg["chat_think_s"][setting]),  # type: ignore[index]
            spread_s=float(cfg["chat_spread_s"][setting]),  # type: ignore[index]
        )
        results = await loading.conversations(session, target.urls, users, scale)
    else:
        per_group = int(cfg["scale_per_group" if base == "scale_event" else "per_group"])  # type: ignore[call-overload]
        requests = workloads.shared_prefix(
            groups=int(cfg["groups"]),  # type: ignore[call-overload]
            per_group=per_group,
            rate=rate,
            hot_share=0.5 if base == "hot_prefix" else 0.0,
            output_tokens=int(cfg["low_output_tokens"]) if low else 256,  # type: ignore[call-overload]
        )
        events: list[loading.Event] = []
        duration = requests[-1].at
        if base == "scale_event" and target.kind != "direct":

            async def grow() -> None:
                await target.set_backends(session, fleet_urls[:9])

            async def shrink() -> None:
                await target.set_backends(session, fleet_urls[:7])

            events = [(duration / 3, grow), (2 * duration / 3, shrink)]
        results = await loading.open_loop(session, target.urls, requests, scale, events)
        if events:
            window = duration / 3 * scale
            moved = {
                "8->9": reporting.groups_moved(results, duration / 3 * scale, window),
                "9->7": reporting.groups_moved(results, 2 * duration / 3 * scale, window),
            }
            await target.set_backends(session, fleet_urls[:FLEET])
    stop.set()
    peak = max((await peaks).values(), default=math.nan)
    after = await loading.replica_counters(session, measure_urls)
    delta = (
        sum(after[u][0] - before[u][0] for u in measure_urls),
        sum(after[u][1] - before[u][1] for u in measure_urls),
    )
    size = 1 if target.kind == "direct" else FLEET
    row = reporting.summarize(target.label, workload, results, delta, scale, size, moved)
    row.peak_load = peak
    if target.kind == "warmstart":
        row.spills = int(await _spills(session, target) - spills_before)
    return row


async def _spills(session: aiohttp.ClientSession, target: fleets.RouterUnderTest) -> float:
    if target.kind != "warmstart":
        return 0.0
    return sum([await loading.router_spills(session, member.internals) for member in target.members])


async def start_target(
    session: aiohttp.ClientSession, name: str, fleet_urls: list[str], ideal_url: str, cfg: dict[str, object], logs: Path
) -> fleets.RouterUnderTest:
    kind, _, rest = name.partition(" ")
    # "x4": four router processes; "before": BASELINE_REF; "guard"; "prefill": prefillAware on
    policy, _, variant = rest.partition(" ")
    if kind == "ideal":
        return fleets.RouterUnderTest("ideal", ideal_url, "direct")
    if kind == "sglang":
        target = await fleets.start_sglang(
            session, policy, fleet_urls[:FLEET], logs, fleets.SGLANG_GUARD if variant == "guard" else None
        )
        target.label = name
        return target
    copies = int(variant[1:]) if variant.startswith("x") else 1
    cache_tokens = int(cfg["cache_tokens"])  # type: ignore[call-overload]
    extra: dict[str, object] = {
        "indexCapacityBlocks": cache_tokens * 4 // 256,
        # each router replica's cap is the replica's limit divided by the router replicas (docs/router.md)
        "maxConcurrentRequests": EngineParams().max_running // copies,
    }
    extra.update(cfg.get("router_config") or {})  # type: ignore[call-overload]
    if variant == "prefill":
        extra["prefillAware"] = True
    source = fleets.checkout(str(cfg["baseline_ref"]), logs.parent) if variant == "before" else None
    target = await fleets.start_warmstart(session, policy, fleet_urls[:FLEET], logs, extra, source)
    for _ in range(copies - 1):
        target.peers.append(await fleets.start_warmstart(session, policy, fleet_urls[:FLEET], logs, extra))
    target.label = name
    return target


async def measure_overhead(
    session: aiohttp.ClientSession,
    logs: Path,
    seconds: float,
    with_sglang: bool,
    baseline_ref: str,
    repeats: int = 1,
) -> dict[str, dict[str, float]]:
    """Latency added over a direct call to a trivial replica (time scale 0), at 200 and 500 req/s.

    With ``repeats`` > 1 every figure is the median of that many alternating rounds.
    """
    port = fleets.free_port()
    sim = fleets.spawn("sim-trivial", fleets.sim_argv(1, port, ["--time-scale", "0"], "t"), logs)
    backend = f"http://{fleets.HOST}:{port}"
    out: dict[str, dict[str, float]] = {}
    targets: list[fleets.RouterUnderTest] = []
    try:
        await fleets.wait_http(session, backend + "/health", sim)
        targets.append(fleets.RouterUnderTest("direct", backend, "direct"))
        targets.append(await fleets.start_warmstart(session, "prefixaware", [backend], logs))
        before = fleets.checkout(baseline_ref, logs.parent)
        old = await fleets.start_warmstart(session, "prefixaware", [backend], logs, None, before)
        old.label = "warmstart prefixaware before"
        targets.append(old)
        if with_sglang:
            targets.append(await fleets.start_sglang(session, "cache_aware", [backend], logs))
        body = {"model": "sim-llm", "prompt": "hello " * 80, "max_tokens": 1}
        for target in targets:
            await loading.fixed_rate(session, target.url + "/v1/completions", 100, 1.0, body)  # warm up
        for _ in range(2):  # CPU per request, one request at a time: the least load-sensitive figure
            for target in targets:
                if target.proc is None:
                    continue
                cpu_before = _cpu_seconds(target) or 0.0
                count = await _sequential(session, target.url + "/v1/completions", body, 400)
                stats = out.setdefault(target.label, {})
                per_request = ((_cpu_seconds(target) or 0.0) - cpu_before) * 1000 / max(1, count)
                stats["cpu_ms_sequential"] = min(stats.get("cpu_ms_sequential", math.inf), per_request)
        rounds: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(repeats):  # rounds alternate, so a burst of load on the machine hits every target alike
            for rate in (200, 500):
                direct: list[float] = []
                for target in targets:  # interleave the targets per rate so machine noise hits all alike
                    cpu_before = _cpu_seconds(target)
                    hist = "warmstart_router_added_latency_seconds"
                    buckets = (
                        await loading.histogram_buckets(session, target.internals, hist)
                        if target.kind == "warmstart"
                        else {}
                    )
                    latencies, errors = await loading.fixed_rate(
                        session, target.url + "/v1/completions", rate, seconds, body
                    )
                    one: dict[str, float] = {}
                    if target.kind == "warmstart":  # the router's own view: time spent inside it, by bucket
                        after = await loading.histogram_buckets(session, target.internals, hist)
                        one[f"inside_p50@{rate}"] = loading.bucket_quantile(buckets, after, 0.5) * 1000
                        one[f"inside_p99@{rate}"] = loading.bucket_quantile(buckets, after, 0.99) * 1000
                    if cpu_before is not None:  # the router's own CPU per request: what limits its rate
                        one[f"cpu_ms_per_request@{rate}"] = (
                            ((_cpu_seconds(target) or 0) - cpu_before) * 1000 / max(1, len(latencies))
                        )
                    one[f"raw_p50@{rate}"] = reporting.percentile(latencies, 50) * 1000
                    one[f"raw_p99@{rate}"] = reporting.percentile(latencies, 99) * 1000
                    one[f"errors@{rate}"] = errors
                    if target.kind == "direct":
                        direct = latencies
                    else:
                        one[f"p50@{rate}"] = one[f"raw_p50@{rate}"] - reporting.percentile(direct, 50) * 1000
                        one[f"p99@{rate}"] = one[f"raw_p99@{rate}"] - reporting.percentile(direct, 99) * 1000
                    rounds.setdefault((target.label, rate), []).append(one)
        for (label, _rate), measured in rounds.items():  # the median round of each figure (errors: summed)
            stats = out.setdefault(label, {})
            for key in measured[0]:
                values = sorted(m[key] for m in measured)
                stats[key] = sum(values) if key.startswith("errors@") else values[len(values) // 2]
    finally:
        for target in targets:
            target.stop()
        sim.stop()
    return out


async def _sequential(session: aiohttp.ClientSession, url: str, body: dict[str, Any], count: int) -> int:
    """Send ``count`` requests one after the other; the number that succeeded."""
    done = 0
    for _ in range(count):
        async with session.post(url, json=body) as response:
            await response.read()
            done += response.status == 200
    return done


def _cpu_seconds(target: fleets.RouterUnderTest) -> float | None:
    """User+system CPU of a router process and its children, or None for the direct target."""
    if target.proc is None:
        return None
    import psutil

    process = psutil.Process(target.proc.popen.pid)
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        try:
            on_cpu = _scheduled_seconds(proc.pid)
            if on_cpu is None:
                times = proc.cpu_times()
                on_cpu = times.user + times.system
            total += on_cpu
        except psutil.NoSuchProcess:
            continue
    return total


def _scheduled_seconds(pid: int) -> float | None:
    """Seconds on CPU of all of a process's threads from Linux schedstat (nanoseconds; None elsewhere).

    ``cpu_times`` counts in clock ticks (10 ms): over 400 requests of ~0.35 ms that is a 7% step.
    """
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total, read = 0, False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                total += int(stat.read().split()[0])
            read = True
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total / 1e9 if read else None


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    logs = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    cfg = plan(args.quick, args.time_scale or (0.25 if args.quick else 0.5))
    cfg["load_basis"] = args.load_basis
    cfg["baseline_ref"] = args.baseline_ref
    cfg["overhead_rounds"] = args.overhead_rounds
    started_run = provenance.start()
    cfg["machine_load_at_start"] = [round(x, 1) for x in started_run.load_average]
    if args.router_config:
        cfg["router_config"] = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.router_config)}
    cfg["random_hit_ratio"] = round(offline_random_hit_ratio(cfg), 4)
    cfg["rate"] = round(arrival_rate(cfg), 2)
    reason = None if args.skip_sglang else fleets.sglang_available()
    with_sglang = not args.skip_sglang and reason is None
    if reason:
        print(f"NOTE: the SGLang router cannot run here: {reason}")
    names = args.routers or routers_for(args.quick, with_sglang)
    chosen = (
        []
        if args.overhead_only
        else (args.workloads or [w for w in WORKLOADS if not (args.quick and w == "scale_event")])
    )
    if args.overhead_only:
        names = []
    started = time.monotonic()
    print(f"plan: {json.dumps(cfg)}; routers: {names}; workloads: {chosen}", flush=True)

    sim_args = [
        "--time-scale",
        str(cfg["time_scale"]),
        "--cache-tokens",
        str(cfg["cache_tokens"]),
        "--stream-chunk-tokens",
        str(args.stream_chunk_tokens),
    ]
    base, ideal_port = fleets.free_block(9), fleets.free_port()
    fleet_proc = fleets.spawn("sim-fleet", fleets.sim_argv(9, base, sim_args), logs)
    ideal_proc = fleets.spawn(
        "sim-ideal", fleets.sim_argv(1, ideal_port, [*sim_args, "--scale-factor", str(FLEET)], "ideal"), logs
    )
    fleet_urls = [f"http://{fleets.HOST}:{base + i}" for i in range(9)]
    ideal_url = f"http://{fleets.HOST}:{ideal_port}"
    by_workload: dict[str, list[reporting.Row]] = {w: [] for w in chosen}
    overhead: dict[str, dict[str, float]] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        try:
            for url in fleet_urls:
                await fleets.wait_http(session, url + "/health", fleet_proc)
            await fleets.wait_http(session, ideal_url + "/health", ideal_proc)
            for name in names:
                for workload in chosen:
                    # a fresh router per workload: a router's shares and index start empty, as in a
                    # new deployment, and no workload inherits the previous one's balance
                    target = await start_target(session, name, fleet_urls, ideal_url, cfg, logs)
                    try:
                        measure = [ideal_url] if target.kind == "direct" else fleet_urls
                        row = await run_workload(session, target, workload, cfg, fleet_urls, measure)
                        by_workload[workload].append(row)
                        print(
                            f"[{time.monotonic() - started:6.1f}s] {workload:13s} {name:28s} hit={row.hit_ratio:.3f} "
                            f"p50={row.ttft_p50_ms:.0f}ms p99={row.ttft_p99_ms:.0f}ms "
                            f"share={row.max_mean_share:.2f} inflight/replica={row.mean_inflight:.1f} "
                            f"peak={row.peak_load:.0f} spills={row.spills} errors={row.errors}",
                            flush=True,
                        )
                    finally:
                        target.stop()
            if not args.skip_overhead:
                overhead = await measure_overhead(
                    session,
                    logs,
                    float(cfg["overhead_seconds"]),  # type: ignore[arg-type]
                    with_sglang,
                    str(cfg["baseline_ref"]),
                    args.overhead_rounds,
                )
        finally:
            fleet_proc.stop()
            ideal_proc.stop()
    report = render(by_workload, overhead, cfg, reason, out, time.monotonic() - started)
    print(report)
    if args.results_name:
        payload = json.loads((out / "routing.json").read_text())
        print(f"wrote {provenance.write(args.results_name, started_run, payload)}")
    return 0


def render(
    by_workload: dict[str, list[reporting.Row]],
    overhead: dict[str, dict[str, float]],
    cfg: dict[str, object],
    sglang_reason: str | None,
    out: Path,
    elapsed: float,
) -> str:
    lines = [
        f"# Routing benchmark ({'quick' if cfg['groups'] == 32 else 'full'} run, {elapsed:.0f} s)",
        "",
        f"Plan: `{json.dumps(cfg)}`",
        "",
        f"Machine load average (1/5/15 min) at start {cfg['machine_load_at_start']}, at the end "
        f"{[round(x, 1) for x in os.getloadavg()]} on {os.cpu_count()} CPUs: TTFTs are only comparable "
        "within one run.",
        "",
    ]
    if sglang_reason:
        lines += [f"**SGLang router not run:** {sglang_reason}", ""]
    for workload, rows in by_workload.items():
        lines += [f"## {workload}", "", reporting.markdown_table(rows), ""]
        lines += [f"- {line}" for line in reporting.ratios(rows, "warmstart random")]
        for baseline in ("warmstart prefixaware before", "sglang cache_aware", "sglang cache_aware guard"):
            lines += [
                f"- {line}" for line in reporting.ratios(rows, baseline) if line.startswith("warmstart prefixaware ")
            ]
        lines.append("")
        reporting.plot_workload(workload, rows, out)
    if overhead:
        lines += [
            "## Router overhead (trivial replica; added latency = via router - direct)",
            "",
            f"Each figure is the median of {cfg.get('overhead_rounds', 1)} round(s), the targets alternating.",
            "",
            "| target | rate | p50 ms | p99 ms | added p50 ms | added p99 ms | router CPU ms/request "
            "| inside the router p50 / p99 ms (≤ bucket) | errors |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        sequential = {
            label: stats["cpu_ms_sequential"] for label, stats in overhead.items() if "cpu_ms_sequential" in stats
        }
        if sequential:
            lines += [
                "Router CPU per request, 400 requests one at a time (best of two rounds; the figure least "
                "sensitive to the machine's load): "
                + ", ".join(f"{label} {value:.3f} ms" for label, value in sequential.items()),
                "",
            ]
        for label, stats in overhead.items():
            if "raw_p50@200" not in stats:
                continue
            for rate in (200, 500):
                added50, added99 = stats.get(f"p50@{rate}", math.nan), stats.get(f"p99@{rate}", math.nan)
                cpu = stats.get(f"cpu_ms_per_request@{rate}", math.nan)
                lines.append(
                    f"| {label} | {rate}/s | {stats[f'raw_p50@{rate}']:.3f} | {stats[f'raw_p99@{rate}']:.3f} | "
                    f"{added50:.3f} | {added99:.3f} | {cpu:.3f} | "
                    f"{stats.get(f'inside_p50@{rate}', math.nan):.2f} / "
                    f"{stats.get(f'inside_p99@{rate}', math.nan):.2f} | "
                    f"{stats[f'errors@{rate}']:.0f} |"
                )
        lines.append("")
    verdicts = reporting.verdicts(by_workload, overhead)
    lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {v['goal']} | {v['measured']} | {v['met']} |" for v in verdicts]
    text = "\n".join(lines) + "\n"
    (out / "routing.md").write_text(text)
    dump = {
        w: [{k: v for k, v in asdict(r).items() if k != "ttfts_ms"} for r in rows] for w, rows in by_workload.items()
    }
    (out / "routing.json").write_text(
        json.dumps({"plan": cfg, "rows": dump, "overhead": overhead, "goals": verdicts}, indent=2, default=str)
    )
    return text


def main() -> int:
    fleet = argparse.ArgumentParser(add_help=False)
    fleet.add_argument("--fleet", choices=["sim", "llamacpp", "events", "gateway"], default="sim")
    chosen, rest = fleet.parse_known_args()
    # bench/routing_engines.py and bench/routing_gateway.py build on this module: run them, don't import them
    if chosen.fleet in ("events", "gateway"):
        program = "routing_engines.py" if chosen.fleet == "events" else "routing_gateway.py"
        os.execv(sys.executable, [sys.executable, str(Path(__file__).with_name(program)), *rest])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--fleet",
        choices=["sim", "llamacpp", "events", "gateway"],
        default="sim",
        help="sim: simulated vLLM replicas (default); llamacpp: real llama.cpp engines (see routing_llamacpp.py); "
        "events: simulated replicas publishing KV events, routers following them (see routing_engines.py); "
        "gateway: Envoy + the endpoint picker vs the proxy vs SGLang (see routing_gateway.py)",
    )
    p.add_argument("--quick", action="store_true", help="demo subset, < 3 minutes")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="real seconds per model second (default 0.25 with --quick, else 0.5: half the real "
        "request rate, so a CPU-starved Python router distorts TTFT less)",
    )
    p.add_argument(
        "--load-basis",
        choices=["random", "cold"],
        default="random",
        help="70%% load means: prefill 70%% busy under random routing (its replayed hit ratio), "
        "or 70%% busy with no cache hits at all",
    )
    p.add_argument(
        "--router-config",
        nargs="*",
        metavar="KEY=VALUE",
        help="extra RouterConfig knobs for the warmstart routers, e.g. loadEpsilon=0.3",
    )
    p.add_argument(
        "--stream-chunk-tokens",
        type=int,
        default=128,
        help="tokens per SSE chunk after the first (TTFT is unaffected; fewer chunks = less CPU)",
    )
    p.add_argument("--skip-sglang", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--overhead-only", action="store_true", help="only the router overhead section")
    p.add_argument(
        "--overhead-rounds",
        type=int,
        default=1,
        help="repeat the overhead rates this many times, alternating targets, and report each figure's median round",
    )
    p.add_argument("--routers", nargs="*", help='subset, e.g. "warmstart prefixaware" ideal')
    p.add_argument(
        "--results-name",
        metavar="NAME",
        help="also write bench/results/<date>-NAME.json: routing.json with the command, commit and load average",
    )
    p.add_argument("--workloads", nargs="*", choices=WORKLOADS)
    p.add_argument(
        "--baseline-ref",
        default=BASELINE_REF,
        help="git commit whose router runs as 'warmstart prefixaware before' (default: before the share bound)",
    )
    routing_llamacpp.add_arguments(p)
    args = p.parse_args()
    if args.fleet == "llamacpp":
        return asyncio.run(_cancellable(routing_llamacpp.main_async(args)))
    return asyncio.run(_cancellable(main_async(args)))


async def _cancellable(coro: Any) -> int:
    """Run the benchmark so that SIGTERM/SIGINT unwind it (and its finally blocks stop the children)."""
    import signal

    task = asyncio.ensure_future(coro)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return int(await task)
    except asyncio.CancelledError:
        print("benchmark interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
