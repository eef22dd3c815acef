"""The resume after a kill -9 at several points of a download, for `bench/preload.py`.

A trial: a clean staging directory, a preload killed -9 once a given fraction of the model's bytes is on disk
(allocated blocks of the staged files, polled every 5 ms), then the resume, timed from its own termination message
like the clean runs. The resume's time over the clean run's is set beside (1 - the fraction on disk at the kill),
which is what a resume that keeps every byte on disk and fetches only the rest would take, start-up aside. The goal:
resume <= (1 - fraction) x clean + 0.5 s. Each trial records the load average, since the machine is shared.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GOAL_SLACK_SECONDS = 0.5


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


def kill_at(argv: list[str], env: dict[str, str], staging: Path, total: int, fraction: float) -> float:
    """Start a preload and kill -9 it once `fraction` of the bytes are on disk; the fraction reached."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        done = allocated(staging) if staging.exists() else 0
        if done >= fraction * total:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return allocated(staging) / total
        time.sleep(0.005)
    raise RuntimeError("the preload finished before it could be killed")


def trials(
    fractions: Sequence[float],
    repeats: int,
    clean_seconds: float,
    kill_argv: list[str],
    env: dict[str, str],
    weights: Path,  # <root>/warmstart/keys
    key: str,
    total: int,
    resume: Callable[[], dict[str, Any]],
    settle_after_kill: bool = False,
) -> list[dict[str, Any]]:
    """For each kill point, `repeats` trials (kill, then `resume()`, which runs the preload and returns its result).

    With `settle_after_kill`, the killed run's dirty pages are written back (`sync`) before the resume is timed, as
    the kernel does during a Job's restart back-off (10 s and more); without it the resume's fsyncs wait on them."""
    points = []
    for fraction in fractions:
        runs = []
        for _ in range(repeats):
            shutil.rmtree(weights / key, ignore_errors=True)
            load = os.getloadavg()[0]
            arrived = kill_at(kill_argv, env, weights / key / ".staging", total, fraction)
            t0 = time.monotonic()
            if settle_after_kill:
                os.sync()
            settled = time.monotonic() - t0
            result = resume()
            seconds = result["reported_seconds"]
            runs.append(
                {
                    "arrived": round(arrived, 4),
                    "resume_seconds": round(seconds, 3),
                    "ratio": round(seconds / clean_seconds, 3),
                    "ideal_ratio": round(1 - arrived, 3),
                    "goal_seconds": round((1 - arrived) * clean_seconds + GOAL_SLACK_SECONDS, 3),
                    "load_avg": round(load, 2),
                    "settle_after_kill_seconds": round(settled, 3) if settle_after_kill else None,
                    "message": result["message"],
                }
            )
        points.append(summary(fraction, runs, clean_seconds))
    return points


def summary(fraction: float, runs: list[dict[str, Any]], clean_seconds: float) -> dict[str, Any]:
    """The median trial of one kill point (by ratio), the spread, and whether the goal was met at the median."""
    ordered = sorted(runs, key=lambda r: r["ratio"])
    mid = ordered[len(ordered) // 2]
    return {
        "target": fraction,
        "clean_seconds": round(clean_seconds, 3),
        "median_ratio": mid["ratio"],
        "ratio_spread": [ordered[0]["ratio"], ordered[-1]["ratio"]],
        "median_arrived": mid["arrived"],
        "median_ideal_ratio": mid["ideal_ratio"],
        "median_resume_seconds": mid["resume_seconds"],
        "median_goal_seconds": mid["goal_seconds"],
        "goal_met": mid["resume_seconds"] <= mid["goal_seconds"],
        "load_avg": [r["load_avg"] for r in runs],
        "runs": runs,
    }


def report(server: str, points: list[dict[str, Any]]) -> list[str]:
    lines = []
    for p in points:
        lines.append(
            f"[{server}] kill -9 at {p['median_arrived']:.0%} on disk: resume {p['median_resume_seconds']:.2f} s = "
            f"{p['median_ratio']:.2f}x clean ({p['clean_seconds']:.2f} s; spread {p['ratio_spread'][0]:.2f}-"
            f"{p['ratio_spread'][1]:.2f}) vs 1 - arrived = {p['median_ideal_ratio']:.2f}; goal <= "
            f"{p['median_goal_seconds']:.2f} s: {'met' if p['goal_met'] else 'NOT met'} "
            f"(load {', '.join(f'{x:.1f}' for x in p['load_avg'])})"
        )
    return lines
