"""The demo's closing table: every figure it measured, each with its goal and whether the run met it.

Pure: figures are computed from plain values and from the raw data the benchmarks write (bench/scaleout.py's
``--json``, bench/routing.py ``--fleet llamacpp``'s ``--results``); nothing is read from disk or the clock here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: bench/scaleout.py's goal: warm (warm cache, image pre-pulled) at most this times cold (cold cache, not pulled)
SCALEOUT_GOAL = 0.4
WARM_CONFIG, COLD_CONFIG = "warm cache, image pre-pulled", "cold cache, image not pulled"
#: the prompt cache: the same prompt's second TTFT at most this times the first's
PROMPT_CACHE_GOAL = 0.1
#: bench/routing.py --fleet llamacpp's goals: prefixaware p50 TTFT at most 0.3 x random's; p99 at most SGLang's
P50_GOAL, P99_GOAL = 0.3, 1.0
PREFIXAWARE, RANDOM, SGLANG = "warmstart prefixaware", "warmstart random", "sglang cache_aware"
#: `make demo`'s own time: with the caches warm, and on a new machine (2 cores) that builds everything first
WARM_MINUTES, COLD_MINUTES = 8.0, 25.0


@dataclasses.dataclass(frozen=True)
class Figure:
    """One measured figure, as the table shows it."""

    step: str
    """The part of the story it belongs to (``scale-out``, ``engine``, ``routing``, ``demo``)."""
    what: str
    value: str
    """The measurement, formatted with its unit."""
    goal: str
    met: bool | None
    """None when the demo could not measure it (a skipped step, a missing router)."""

    @property
    def verdict(self) -> str:
        return "-" if self.met is None else "met" if self.met else "MISSED"


def at_most(value: float, limit: float) -> bool | None:
    """``value <= limit``; None when ``value`` is not a number (nothing measured)."""
    return None if math.isnan(value) else value <= limit


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


def scaleout(report: Mapping[str, Any]) -> list[Figure]:
    """The real node's one-replica scale-out, warm vs cold, from bench/scaleout.py's ``--json``."""
    medians = report.get("medians") or {}
    warm = float((medians.get(WARM_CONFIG) or {}).get("ready_s", math.nan))
    cold = float((medians.get(COLD_CONFIG) or {}).get("ready_s", math.nan))
    value = ratio(warm, cold)
    return [
        Figure(
            "scale-out",
            "one replica to Ready on the real node: warm vs cold",
            f"{warm:.1f} s vs {cold:.1f} s ({value:.2f}x)",
            f"warm <= {SCALEOUT_GOAL} x cold",
            at_most(value, SCALEOUT_GOAL),
        )
    ]


def preload(bytes_done: int, seconds: float, found_warm: bool) -> Figure:
    """The seed endpoint's preload on the real node, and whether its model pod then found the weights."""
    return Figure(
        "scale-out",
        "seed preload on the real node",
        f"{bytes_done / 1024**3:.2f} GiB in {seconds:.1f} s",
        "the model pod finds them (AlreadyPresent)",
        found_warm,
    )


def completion(text: str) -> Figure:
    """The real engine's completion through the endpoint's Service and router."""
    return Figure(
        "engine", "a real completion through the router", f"{len(text.split())} words", "an answer", bool(text)
    )


def prompt_cache(first_ms: float, second_ms: float, reused: int, prompt_tokens: int) -> Figure:
    """The same long prompt twice: the second reuses the first's tokens from the engine's prompt cache."""
    value = ratio(second_ms, first_ms)
    return Figure(
        "engine",
        "TTFT of a prompt, first vs repeated",
        f"{first_ms:.0f} ms vs {second_ms:.0f} ms ({value:.3f}x; {reused}/{prompt_tokens} tokens reused)",
        f"repeated <= {PROMPT_CACHE_GOAL} x first",
        at_most(value, PROMPT_CACHE_GOAL),
    )


def _median(row: Mapping[str, Any], key: str) -> float:
    return float(((row.get(key) or {}).get("median", math.nan)) if row else math.nan)


def routing(report: Mapping[str, Any], workload: str = "documents") -> list[Figure]:
    """random vs prefixaware vs SGLang's router on the real engines, from bench/routing.py's ``--results``."""
    rows: Mapping[str, Any] = (report.get("summary") or {}).get(workload) or {}
    mine, base, sglang = (rows.get(label) or {} for label in (PREFIXAWARE, RANDOM, SGLANG))
    p50 = {label: _median(rows.get(label) or {}, "ttft_p50") for label in (PREFIXAWARE, RANDOM, SGLANG)}
    hits = {label: _median(rows.get(label) or {}, "hit_ratio") for label in (PREFIXAWARE, RANDOM, SGLANG)}
    p50_ratio = ratio(_median(mine, "ttft_p50"), _median(base, "ttft_p50"))
    p99_ratio = ratio(_median(mine, "ttft_p99"), _median(sglang, "ttft_p99"))
    hit_gap = hits[PREFIXAWARE] - hits[SGLANG]
    return [
        Figure(
            "routing",
            "TTFT p50: prefixaware vs random",
            f"{p50[PREFIXAWARE] * 1000:.0f} ms vs {p50[RANDOM] * 1000:.0f} ms ({p50_ratio:.2f}x)",
            f"prefixaware <= {P50_GOAL} x random",
            at_most(p50_ratio, P50_GOAL),
        ),
        Figure(
            "routing",
            "TTFT p99: prefixaware vs SGLang cache_aware",
            f"{_median(mine, 'ttft_p99') * 1000:.0f} ms vs {_median(sglang, 'ttft_p99') * 1000:.0f} ms "
            f"({p99_ratio:.2f}x)",
            f"prefixaware <= {P99_GOAL:g} x SGLang",
            at_most(p99_ratio, P99_GOAL),
        ),
        Figure(
            "routing",
            "engine hit ratio: prefixaware, random, SGLang",
            f"{hits[PREFIXAWARE]:.2f}, {hits[RANDOM]:.2f}, {hits[SGLANG]:.2f}",
            "prefixaware >= SGLang - 0.05",
            None if math.isnan(hit_gap) else hit_gap >= -0.05,
        ),
    ]


def duration(seconds: float, caches_warm: bool) -> Figure:
    """The demo's own time against the goal for its case: caches warm, or a new machine that builds first."""
    limit = WARM_MINUTES if caches_warm else COLD_MINUTES
    case = "caches warm" if caches_warm else "new machine, 2 cores"
    return Figure(
        "demo", "the whole demo", f"{seconds / 60:.1f} min", f"<= {limit:g} min ({case})", at_most(seconds / 60, limit)
    )


def render(figures: Iterable[Figure]) -> str:
    """A fixed-width table: step, figure, value, goal, met/MISSED (``-``: not measured)."""
    rows = [("STEP", "FIGURE", "MEASURED", "GOAL", "")] + [
        (f.step, f.what, f.value, f.goal, f.verdict) for f in figures
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)] + [0]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def missed(figures: Iterable[Figure]) -> list[Figure]:
    """The figures whose goal the run missed."""
    return [f for f in figures if f.met is False]
