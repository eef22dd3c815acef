"""Turn benchmark results into numbers, a Markdown table, goal verdicts and PNG plots."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loading import Result


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Row:
    """One router on one workload."""

    router: str
    workload: str
    requests: int
    errors: int
    hit_ratio: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    throughput_rps: float
    max_mean_share: float
    per_replica: dict[str, int]
    moved: dict[str, float] = field(default_factory=dict)
    ttfts_ms: list[float] = field(default_factory=list)
    spills: int | None = None
    path_delay_p50_ms: float = math.nan
    path_delay_p99_ms: float = math.nan
    ttft_scaled_p50_ms: float = math.nan
    ttft_scaled_p99_ms: float = math.nan
    engine_ttft_p50_ms: float = math.nan
    engine_ttft_p99_ms: float = math.nan
    """TTFT inside the replicas only (slot wait, prefill queue, prefill): what routing decides,
    without the machine's event-loop and network delays (which a loaded machine inflates)."""
    mean_inflight: float = math.nan
    """Mean requests in flight per replica over the run (Little's law: summed latency / span / replicas)."""
    peak_load: float = math.nan
    """Highest running + waiting sequences any replica reported (polled every 0.25 s)."""

    def table_cells(self) -> list[str]:
        moved = " / ".join(f"{v:.2f}" for v in self.moved.values()) if self.moved else "-"
        return [
            self.router,
            f"{self.hit_ratio:.3f}",
            f"{self.ttft_p50_ms:.0f}",
            f"{self.ttft_p95_ms:.0f}",
            f"{self.ttft_p99_ms:.0f}",
            f"{self.path_delay_p50_ms:.1f} / {self.path_delay_p99_ms:.0f}",
            f"{self.engine_ttft_p50_ms:.0f} / {self.engine_ttft_p99_ms:.0f}",
            f"{self.throughput_rps:.1f}",
            f"{self.max_mean_share:.2f}",
            f"{self.mean_inflight:.1f}",
            f"{self.peak_load:.0f}",
            moved,
            str(self.errors),
        ]


HEADER = [
    "router",
    "hit ratio",
    "TTFT p50 ms",
    "p95 ms",
    "p99 ms",
    "real path delay p50 / p99 ms",
    "engine TTFT p50 / p99 ms",
    "req/s",
    "max/mean share",
    "mean in-flight / replica",
    "peak load / replica",
    "groups moved 8→9 / 9→7",
    "errors",
]


def summarize(
    router: str,
    workload: str,
    results: list[Result],
    counters: tuple[float, float],
    scale: float,
    fleet_size: int,
    moved: dict[str, float] | None = None,
) -> Row:
    ok = [r for r in results if r.error is None and r.ttft is not None and r.latency is not None]
    ttfts = [r.ttft * 1000 for r in ok if r.ttft is not None]
    scaled = [r.ttft_scaled * 1000 for r in ok if r.ttft_scaled is not None]
    delays = [r.path_delay * 1000 for r in ok if r.path_delay is not None]
    engine = [(r.ttft - r.path_delay) * 1000 for r in ok if r.ttft is not None and r.path_delay is not None]
    queries, hits = counters
    ends = [r.sent / scale + (r.latency or 0) for r in ok]
    span = (max(ends) - min(r.sent / scale for r in ok)) if ok else math.nan
    per_replica = Counter(r.replica or "?" for r in ok)
    mean = len(ok) / max(1, fleet_size)
    return Row(
        router=router,
        workload=workload,
        requests=len(results),
        errors=len(results) - len(ok),
        hit_ratio=hits / queries if queries else math.nan,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p95_ms=percentile(ttfts, 95),
        ttft_p99_ms=percentile(ttfts, 99),
        throughput_rps=len(ok) / span if span and span > 0 else math.nan,
        max_mean_share=max(per_replica.values()) / mean if per_replica and mean else math.nan,
        per_replica=dict(sorted(per_replica.items())),
        moved=moved or {},
        ttfts_ms=ttfts,
        ttft_scaled_p50_ms=percentile(scaled, 50),
        ttft_scaled_p99_ms=percentile(scaled, 99),
        path_delay_p50_ms=percentile(delays, 50),
        path_delay_p99_ms=percentile(delays, 99),
        engine_ttft_p50_ms=percentile(engine, 50),
        engine_ttft_p99_ms=percentile(engine, 99),
        mean_inflight=sum(r.latency or 0 for r in ok) / span / max(1, fleet_size) if span and span > 0 else math.nan,
    )


def groups_moved(results: list[Result], event_at_real: float, window_real: float) -> float:
    """Share of groups whose majority replica differs between the windows before and after an event."""
    before: dict[str, Counter[str]] = defaultdict(Counter)
    after: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        if r.replica is None or r.error is not None:
            continue
        if event_at_real - window_real <= r.sent < event_at_real:
            before[r.group][r.replica] += 1
        elif event_at_real <= r.sent < event_at_real + window_real:
            after[r.group][r.replica] += 1
    common = [g for g in before if g in after]
    if not common:
        return math.nan
    moved = sum(1 for g in common if before[g].most_common(1)[0][0] != after[g].most_common(1)[0][0])
    return moved / len(common)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row.table_cells()) + " |" for row in rows]
    return "\n".join(lines)


def ratios(rows: list[Row], baseline: str) -> list[str]:
    """TTFT and hit-ratio ratios of every row against ``baseline`` (same workload)."""
    base = next((r for r in rows if r.router == baseline), None)
    if base is None:
        return []
    out = []
    for row in rows:
        if row.router == baseline:
            continue
        out.append(
            f"{row.router} vs {baseline}: TTFT p50 x{row.ttft_p50_ms / base.ttft_p50_ms:.2f}, "
            f"p99 x{row.ttft_p99_ms / base.ttft_p99_ms:.2f}, hit ratio x{_div(row.hit_ratio, base.hit_ratio)}"
        )
    return out


def _div(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b and not math.isnan(b) else "n/a"


def _save(fig: Any, path: Path) -> Path:
    """Write a figure as PNG and release it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_workload(workload: str, rows: list[Row], out: Path) -> list[Path]:
    """TTFT CDF and per-replica request counts, one PNG each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        values = sorted(row.ttfts_ms)
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=row.router)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, model time)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"TTFT CDF - {workload}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    paths.append(_save(fig, out / f"ttft_cdf_{workload}.png"))

    fleet_rows = [row for row in rows if not row.router.startswith("ideal")]
    replicas = sorted({name for row in fleet_rows for name in row.per_replica})
    if replicas:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        width = 0.8 / max(1, len(fleet_rows))
        for i, row in enumerate(fleet_rows):
            xs = [j + i * width for j in range(len(replicas))]
            ax.bar(xs, [row.per_replica.get(name, 0) for name in replicas], width=width, label=row.router)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(replicas))], replicas)
        ax.set_ylabel("requests served")
        ax.set_title(f"Per-replica load - {workload}")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out / f"replica_load_{workload}.png"))
    return paths


def verdicts(by_workload: dict[str, list[Row]], overhead: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Each routing goal with the measured value and whether it is met."""
    out: list[dict[str, Any]] = []

    def row(workload: str, router: str) -> Row | None:
        return next((r for r in by_workload.get(workload, []) if r.router == router), None)

    def add(goal: str, value: str, met: bool | None) -> None:
        out.append({"goal": goal, "measured": value, "met": "n/a" if met is None else ("yes" if met else "NO")})

    ws, ideal, rnd, sgl = (
        row("shared_prefix", "warmstart prefixaware"),
        row("shared_prefix", "ideal"),
        row("shared_prefix", "warmstart random"),
        row("shared_prefix", "sglang cache_aware"),
    )
    if ws and ideal:
        add(
            "hit ratio >= 0.95 x ideal (shared prefix)",
            f"{ws.hit_ratio:.3f} vs {0.95 * ideal.hit_ratio:.3f}",
            ws.hit_ratio >= 0.95 * ideal.hit_ratio,
        )
    if ws and sgl:
        add(
            "hit ratio >= SGLang cache_aware",
            f"{ws.hit_ratio:.3f} vs {sgl.hit_ratio:.3f}",
            ws.hit_ratio >= sgl.hit_ratio,
        )
    if ws and rnd:
        for q in ("p50", "p99"):
            a, b = getattr(ws, f"ttft_{q}_ms"), getattr(rnd, f"ttft_{q}_ms")
            add(
                f"TTFT {q} >= 80% below random", f"{100 * (1 - a / b):.1f}% below ({a:.0f} vs {b:.0f} ms)", a <= 0.2 * b
            )
    hot, hot_ideal = row("hot_prefix", "warmstart prefixaware"), row("hot_prefix", "ideal")
    if hot:
        add("hot prefix max/mean share <= 1.25", f"{hot.max_mean_share:.2f}", hot.max_mean_share <= 1.25)
    if hot and hot_ideal:
        add(
            "hot prefix hit ratio >= 0.8 x ideal",
            f"{hot.hit_ratio:.3f} vs {0.8 * hot_ideal.hit_ratio:.3f}",
            hot.hit_ratio >= 0.8 * hot_ideal.hit_ratio,
        )
    _router_goals(row, add)
    scale = row("scale_event", "warmstart prefixaware")
    if scale and scale.moved:
        first = next(iter(scale.moved.values()))
        add("<= 1.25/9 of groups moved at 8->9", f"{first:.3f} vs {1.25 / 9:.3f}", first <= 1.25 / 9)
    ws_over = overhead.get("warmstart prefixaware", {})
    sgl_over = overhead.get("sglang cache_aware", {})
    old_over = overhead.get("warmstart prefixaware before", {})
    if "cpu_ms_sequential" in ws_over and "cpu_ms_sequential" in old_over:
        ours, before = ws_over["cpu_ms_sequential"], old_over["cpu_ms_sequential"]
        add(
            "router CPU per request < before",
            f"{ours:.3f} vs {before:.3f} ms (x{_div(ours, before)})",
            ours < before,
        )
    if "cpu_ms_sequential" in ws_over and "cpu_ms_sequential" in sgl_over:
        ours, theirs = ws_over["cpu_ms_sequential"], sgl_over["cpu_ms_sequential"]
        add(
            "router CPU per request <= SGLang's (informative)",
            f"{ours:.3f} vs {theirs:.3f} ms (x{_div(ours, theirs)})",
            ours <= theirs,
        )
    for rate in ("200", "500"):
        if f"p50@{rate}" in ws_over and f"p50@{rate}" in sgl_over:
            ours, theirs = ws_over[f"p50@{rate}"], sgl_over[f"p50@{rate}"]
            add(
                f"added latency p50 <= SGLang's @{rate}/s ",
                f"{ours:.3f} vs {theirs:.3f} ms (x{_div(ours, theirs)})",
                ours <= theirs,
            )
    for rate in ("200", "500"):
        if f"p50@{rate}" in ws_over:
            p50, p99 = ws_over[f"p50@{rate}"], ws_over[f"p99@{rate}"]
            noisy = " (negative: the direct path's own noise exceeded the router's; inconclusive)"
            add(
                f"overhead p50 <= 0.3 ms @{rate}/s",
                f"{p50:.3f} ms" + (noisy if p50 < 0 else ""),
                None if p50 < 0 else p50 <= 0.3,
            )
            add(
                f"overhead p99 <= 1.5 ms @{rate}/s",
                f"{p99:.3f} ms" + (noisy if p99 < 0 else ""),
                None if p99 < 0 else p99 <= 1.5,
            )
    return out


#: Workloads of the balance goal, at high and low load.
BALANCE_WORKLOADS = ("shared_prefix", "multi_turn", "hot_prefix")
#: Per-replica concurrency limit of the simulated engine (max running sequences).
REPLICA_CAP = 64


def _router_goals(row: Any, add: Any) -> None:
    """The router goals: router replicas agree, balance at low and high load, hit ratio, p99 TTFT."""
    for base in BALANCE_WORKLOADS:
        for workload in (base, f"{base}@low", f"{base}@low16"):  # low16: the former chat setting, for comparison
            one = row(workload, "warmstart prefixaware")
            if one is None:
                continue
            for copies in (2, 4):
                many = row(workload, f"warmstart prefixaware x{copies}")
                if many:
                    add(
                        f"{workload}: hit ratio with {copies} routers within 0.03 of one",
                        f"{many.hit_ratio:.3f} vs {one.hit_ratio:.3f}",
                        abs(many.hit_ratio - one.hit_ratio) <= 0.03,
                    )
                    add(
                        f"{workload}: peak load per replica with {copies} routers <= cap {REPLICA_CAP}",
                        f"{many.peak_load:.0f}",
                        None if math.isnan(many.peak_load) else many.peak_load <= REPLICA_CAP,
                    )
            add(
                f"{workload}: max/mean request share <= 1.3 (mean in-flight {one.mean_inflight:.1f}/replica)",
                f"{one.max_mean_share:.2f}",
                one.max_mean_share <= 1.3,
            )
            before = row(workload, "warmstart prefixaware before")
            if before:
                add(
                    f"{workload}: hit ratio >= 0.98 x before",
                    f"{one.hit_ratio:.3f} vs {0.98 * before.hit_ratio:.3f} (x{_div(one.hit_ratio, before.hit_ratio)})",
                    one.hit_ratio >= 0.98 * before.hit_ratio,
                )
            peers = [r for r in (row(workload, "sglang cache_aware"), row(workload, "sglang cache_aware guard")) if r]
            if peers:
                best = min(peers, key=lambda r: r.ttft_p99_ms)
                add(
                    f"{workload}: TTFT p99 <= best SGLang ({best.router})",
                    f"{one.ttft_p99_ms:.0f} vs {best.ttft_p99_ms:.0f} ms (x{_div(one.ttft_p99_ms, best.ttft_p99_ms)})",
                    one.ttft_p99_ms <= best.ttft_p99_ms,
                )
                best = min(peers, key=lambda r: r.engine_ttft_p99_ms)
                ours, theirs = one.engine_ttft_p99_ms, best.engine_ttft_p99_ms
                add(
                    f"{workload}: engine TTFT p99 (without the machine's path delay) <= best SGLang ({best.router})",
                    f"{ours:.0f} vs {theirs:.0f} ms (x{_div(ours, theirs)})",
                    ours <= theirs,
                )
                tuned = row(workload, "warmstart prefixaware prefill")
                if tuned:  # prefillAware, the single-router setting (docs/router.md)
                    best = min(peers, key=lambda r: r.ttft_p99_ms)
                    add(
                        f"{workload}: TTFT p99 with prefillAware (one router) <= best SGLang ({best.router})",
                        f"{tuned.ttft_p99_ms:.0f} vs {best.ttft_p99_ms:.0f} ms "
                        f"(x{_div(tuned.ttft_p99_ms, best.ttft_p99_ms)}), hit ratio {tuned.hit_ratio:.3f}",
                        tuned.ttft_p99_ms <= best.ttft_p99_ms,
                    )
