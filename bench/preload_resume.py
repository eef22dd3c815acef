"""The resume after a kill -9 at several points of a download, for `bench/preload.py`.

A trial: a clean run (its own, right before: the machine is shared and its load moves, so each resume is set
against a clean run made in the same minute), then from a clean staging directory a preload killed -9 once the
given fraction of that clean run's *time* has passed (from its start, interpreter included, as the clean run's wall
time is measured), then the resume, timed from its own termination message like the clean run. The bytes on disk at
the kill (allocated blocks of the staged files) give the fraction arrived. Three goals per trial:

- speed: resume <= (1 - fraction arrived) x clean + 0.5 s;
- kept: the resume keeps (its result's `kept`) at least the bytes on disk at the kill - 8 MiB x connections;
- throughput: the resume's fetch (bytes fetched over its fetch phase) >= 0.9x the clean run's, in the same run.

Each trial records the load average, since the machine is shared.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GOAL_SLACK_SECONDS = 0.5
LOST_PER_CONNECTION = 8 << 20
THROUGHPUT_GOAL = 0.9
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def allocated(path: Path) -> int:
    """Bytes the files under `path` occupy on disk (part files are sparse until written); journals left out."""
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            if name.endswith((".jsonl", ".tmp")):
                continue
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def fetch_rate(message: str) -> float | None:
    """Bytes per second of a result's fetch phase: the bytes fetched over the phase's seconds, from its message."""
    size = re.search(r"\(([\d.]+) (B|KiB|MiB|GiB|TiB) at ", message)
    phase = re.search(r"[(,] ?fetch ([\d.]+)s", message)
    if not size or not phase or float(phase.group(1)) <= 0:
        return None
    return float(size.group(1)) * UNITS[size.group(2)] / float(phase.group(1))


def kill_after(argv: list[str], env: dict[str, str], staging: Path, seconds: float) -> int | None:
    """Start a preload and kill -9 it `seconds` after its start; the bytes on disk then (None: it finished first)."""
    deadline = time.monotonic() + seconds
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return allocated(staging)
        time.sleep(min(left, 0.005))
    return None


def trials(
    fractions: Sequence[float],
    repeats: int,
    clean_run: Callable[[], dict[str, Any]],  # a whole preload from nothing: its result
    kill_argv: list[str],
    env: dict[str, str],
    weights: Path,  # <root>/warmstart/keys
    key: str,
    total: int,
    resume: Callable[[], dict[str, Any]],
    connections: int,
    settle_after_kill: bool = False,
) -> list[dict[str, Any]]:
    """For each kill point, `repeats` trials: a clean run, the kill, then `resume()`, which runs the preload and
    returns its result.

    With `settle_after_kill`, the killed run's dirty pages are written back (`sync`) before the resume is timed, as
    the kernel does during a Job's restart back-off (10 s and more); without it the resume's fsyncs wait on them."""
    points = []
    for fraction in fractions:
        runs: list[dict[str, Any]] = []
        misses = 0
        while len(runs) < repeats and misses < repeats:
            clean_result = clean_run()
            clean = {
                "reported": clean_result["reported_seconds"],
                "wall": clean_result["process_wall_seconds"],
                "fetch_rate": fetch_rate(clean_result["message"]) or 0.0,
            }
            shutil.rmtree(weights / key, ignore_errors=True)
            load = os.getloadavg()[0]
            on_disk = kill_after(kill_argv, env, weights / key / ".staging", fraction * clean["wall"])
            if on_disk is None:
                misses += 1  # the run finished before the kill: no trial
                continue
            t0 = time.monotonic()
            if settle_after_kill:
                os.sync()
            settled = time.monotonic() - t0
            result = resume()
            seconds, arrived = result["reported_seconds"], on_disk / total
            rate = fetch_rate(result["message"])
            goal = (1 - arrived) * clean["reported"] + GOAL_SLACK_SECONDS
            runs.append(
                {
                    "clean_seconds": round(clean["reported"], 3),
                    "clean_wall_seconds": round(clean["wall"], 3),
                    "clean_fetch_mib_s": round(clean["fetch_rate"] / (1 << 20), 1),
                    "kill_after_seconds": round(fraction * clean["wall"], 3),
                    "arrived": round(arrived, 4),
                    "on_disk_bytes": on_disk,
                    "kept_bytes": result["kept"],
                    "kept_goal_bytes": on_disk - LOST_PER_CONNECTION * connections,
                    "kept_goal_met": result["kept"] >= on_disk - LOST_PER_CONNECTION * connections,
                    "resume_seconds": round(seconds, 3),
                    "ratio": round(seconds / clean["reported"], 3),
                    "ideal_ratio": round(1 - arrived, 3),
                    "goal_seconds": round(goal, 3),
                    "margin_seconds": round(goal - seconds, 3),
                    "fetch_mib_s": round(rate / (1 << 20), 1) if rate else None,
                    "throughput_ratio": round(rate / clean["fetch_rate"], 3) if rate and clean["fetch_rate"] else None,
                    "load_avg": round(load, 2),
                    "settle_after_kill_seconds": round(settled, 3) if settle_after_kill else None,
                    "clean_message": clean_result["message"],
                    "message": result["message"],
                }
            )
        if runs:
            points.append(summary(fraction, runs))
    return points


def summary(fraction: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median trial of one kill point (by its margin to the speed goal), the spread, and the goals at the
    median."""
    ordered = sorted(runs, key=lambda r: -r["margin_seconds"])
    mid = ordered[len(ordered) // 2]
    throughputs = sorted(r["throughput_ratio"] for r in runs if r["throughput_ratio"] is not None)
    return {
        "target": fraction,
        "clean_seconds": mid["clean_seconds"],
        "median_ratio": mid["ratio"],
        "ratio_spread": [min(r["ratio"] for r in runs), max(r["ratio"] for r in runs)],
        "median_arrived": mid["arrived"],
        "median_ideal_ratio": mid["ideal_ratio"],
        "median_resume_seconds": mid["resume_seconds"],
        "median_goal_seconds": mid["goal_seconds"],
        "median_margin_seconds": mid["margin_seconds"],
        "goal_met": mid["margin_seconds"] >= 0,
        "kept_goal_met_in_every_trial": all(r["kept_goal_met"] for r in runs),
        "median_throughput_ratio": throughputs[len(throughputs) // 2] if throughputs else None,
        "load_avg": [r["load_avg"] for r in runs],
        "runs": runs,
    }


def report(server: str, points: list[dict[str, Any]]) -> list[str]:
    lines = []
    for p in points:
        throughput = p["median_throughput_ratio"]
        lines.append(
            f"[{server}] kill -9 at {p['target']:.0%} of the clean run's time ({p['median_arrived']:.0%} on disk): "
            f"resume {p['median_resume_seconds']:.2f} s = {p['median_ratio']:.2f}x clean ({p['clean_seconds']:.2f} s; "
            f"spread {p['ratio_spread'][0]:.2f}-{p['ratio_spread'][1]:.2f}) vs 1 - arrived = "
            f"{p['median_ideal_ratio']:.2f}; goal <= {p['median_goal_seconds']:.2f} s: "
            f"{'met' if p['goal_met'] else 'NOT met'} by {p['median_margin_seconds']:+.2f} s; kept bytes goal "
            f"{'met' if p['kept_goal_met_in_every_trial'] else 'NOT met'} in every trial; fetch "
            f"{f'{throughput:.2f}x' if throughput else '?'} the clean run's "
            f"(load {', '.join(f'{x:.1f}' for x in p['load_avg'])})"
        )
    return lines
