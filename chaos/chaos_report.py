"""The chaos suite's figures: one record per injected fault, folded into one table row per scenario.

Pure: no I/O except `write`, which puts the JSON and the Markdown table under bench/out and between the markers
of docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

BEGIN = "<!-- chaos-table:begin -->"
END = "<!-- chaos-table:end -->"


@dataclasses.dataclass
class Run:
    """One injected fault and what the invariants said about it."""

    scenario: str
    seed: int
    converged: bool
    seconds: float
    """Time from the fault to convergence (or to giving up)."""
    leaks: list[str] = dataclasses.field(default_factory=list)
    """Objects or state left behind that should not exist (labels, finalizers, duplicate Jobs, staging dirs, ...)."""
    violations: list[str] = dataclasses.field(default_factory=list)
    """Other broken invariants (a wrong reason, a hung request, an incomplete cache published, ...)."""
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.converged and not self.leaks and not self.violations


@dataclasses.dataclass(frozen=True)
class Row:
    scenario: str
    runs: int
    converged: int
    p50: float | None
    p99: float | None
    leaks: int
    violations: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def rows(runs: Iterable[Run]) -> list[Row]:
    """One row per scenario, in the order scenarios first appear."""
    by: dict[str, list[Run]] = {}
    for run in runs:
        by.setdefault(run.scenario, []).append(run)
    out = []
    for scenario, group in by.items():
        times = [r.seconds for r in group if r.converged]
        out.append(
            Row(
                scenario=scenario,
                runs=len(group),
                converged=sum(r.converged for r in group),
                p50=percentile(times, 50),
                p99=percentile(times, 99),
                leaks=sum(len(r.leaks) for r in group),
                violations=sum(len(r.violations) for r in group),
            )
        )
    return out


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(found: Sequence[Row]) -> str:
    """The Markdown table of figures."""
    lines = [
        "| scenario | runs | converged | time to converge p50 | p99 | leaks found | other violations |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in found:
        lines.append(
            f"| {row.scenario} | {row.runs} | {row.converged} | {_seconds(row.p50)} | {_seconds(row.p99)} "
            f"| {row.leaks} | {row.violations} |"
        )
    return "\n".join(lines)


def failures(runs: Iterable[Run]) -> list[str]:
    """One line per run that broke an invariant."""
    out = []
    for run in runs:
        if run.ok:
            continue
        what = "; ".join([*(f"leak: {x}" for x in run.leaks), *(f"violation: {x}" for x in run.violations)])
        if not run.converged:
            what = f"did not converge in {run.seconds:.0f} s; {what}".rstrip("; ")
        out.append(f"- {run.scenario} (seed {run.seed}): {what}{' (' + run.note + ')' if run.note else ''}")
    return out


def splice(document: str, block: str) -> str:
    """`document` with the text between the table markers replaced by `block` (markers appended if absent)."""
    fenced = f"{BEGIN}\n{block}\n{END}"
    if BEGIN in document and END in document:
        return re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: fenced, document, flags=re.S)
    return document.rstrip("\n") + "\n\n" + fenced + "\n"


def recorded() -> dict[str, Any]:
    """What reproduces the figures: the command, the commit, the time, the machine's cores and load average."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "command": " ".join(sys.argv),
        "commit": commit or None,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
    }


def write(runs: list[Run], out_dir: pathlib.Path, doc: pathlib.Path | None, header: str) -> str:
    """Write bench/out/chaos.json and chaos.md, and the table into `doc`; returns the Markdown block."""
    found = rows(runs)
    broken = failures(runs)
    verdict = "Runs that broke an invariant:" if broken else "No run broke an invariant."
    block = "\n".join([header, "", table(found), "", verdict, *broken])
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    payload = {
        "recorded": recorded(),
        "runs": [dataclasses.asdict(r) for r in runs],
        "rows": [dataclasses.asdict(r) for r in found],
    }
    (out_dir / f"chaos-{stamp}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out_dir / "chaos.md").write_text(block + "\n")
    if doc is not None:
        doc.write_text(splice(doc.read_text() if doc.exists() else "", block))
    return block


V = TypeVar("V")


def cycle(
    variants: Sequence[V],
    runs: int,
    seed: int,
    deadline: float,
    one: Callable[[V, int], Run],
    report: Callable[[Run], None],
) -> list[Run]:
    """Up to `runs` runs of `one(variant, seed)`: the variants in turn, the seeds counting up from `seed`, stopping
    at `deadline` (time.monotonic); each run is reported as it ends."""
    out = []
    for i in range(runs):
        if time.monotonic() > deadline:
            break
        run = one(variants[i % len(variants)], seed + i)
        report(run)
        out.append(run)
    return out
