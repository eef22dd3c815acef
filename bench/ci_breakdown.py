"""Where the test suite's time goes: per directory, per test file and per fixture, as a Markdown report.

Reads what a run left: the ``WARMSTART_TEST_TIMES`` file (tests/conftest.py: one line per test phase and per slow
fixture setup, with the pytest-xdist worker), or else a run's output with ``--durations=0`` (setup, call and teardown
per test, no workers). Test time is summed per test as each worker ran it, so under parallel workers the sum is the
suite's serial cost on a machine as busy as that one, not the run's wall time (reported apart, with each worker's busy
time).

usage: python bench/ci_breakdown.py RUN.tsv|RUN.txt [--top N] > report.md
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import re

DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S.*)$")


@dataclasses.dataclass
class Phase:
    """One phase of one test."""

    worker: str
    when: str
    start: float
    seconds: float
    nodeid: str


@dataclasses.dataclass
class FixtureSetup:
    """One slow fixture setup."""

    worker: str
    start: float
    seconds: float
    scope: str
    name: str
    nodeid: str


def _plain(nodeid: str) -> str:
    """The node id without pytest-xdist's ``@group`` suffix."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def read(path: pathlib.Path) -> tuple[list[Phase], list[FixtureSetup]]:
    phases: list[Phase] = []
    fixtures: list[FixtureSetup] = []
    for line in path.read_text(errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) == 6 and fields[1] in ("setup", "call", "teardown"):
            worker, when, start, seconds, _, nodeid = fields
            phases.append(Phase(worker, when, float(start), float(seconds), _plain(nodeid)))
        elif len(fields) == 7 and fields[1] == "fixture":
            worker, _, start, seconds, scope, name, nodeid = fields
            fixtures.append(FixtureSetup(worker, float(start), float(seconds), scope, name, _plain(nodeid)))
        elif match := DURATION.match(line):
            phases.append(Phase("-", match[2], 0.0, float(match[1]), _plain(match[3].strip())))
    return phases, fixtures


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def report(phases: list[Phase], fixtures: list[FixtureSetup], top: int) -> str:
    lines: list[str] = []
    tests = {p.nodeid for p in phases}
    total = sum(p.seconds for p in phases)
    lines.append(f"{len(tests)} tests, {_minutes(total)} min of test time (setup + call + teardown, summed).\n")

    workers = sorted({p.worker for p in phases} - {"-"})
    if workers:
        first = min(p.start for p in phases)
        last = max(p.start + p.seconds for p in phases)
        lines.append(f"Wall time from the first test's start to the last one's end: {_minutes(last - first)} min.\n")
        lines.append("| worker | tests | busy (min) | last test ends at (min) | slow fixture setups (min) |")
        lines.append("|---|---:|---:|---:|---:|")
        for worker in workers:
            own = [p for p in phases if p.worker == worker]
            busy = sum(p.seconds for p in own)
            end = max(p.start + p.seconds for p in own) - first
            fixed = sum(f.seconds for f in fixtures if f.worker == worker)
            count = len({p.nodeid for p in own})
            lines.append(f"| {worker} | {count} | {_minutes(busy)} | {_minutes(end)} | {_minutes(fixed)} |")
        lines.append("")

    per_dir: dict[str, float] = collections.defaultdict(float)
    per_file: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    counts: dict[str, set[str]] = collections.defaultdict(set)
    for p in phases:
        path = p.nodeid.split("::", 1)[0]
        per_dir[path.rsplit("/", 1)[0]] += p.seconds
        per_file[path][p.when] += p.seconds
        counts[path].add(p.nodeid)

    lines.append("## Per directory\n")
    lines.append("| directory | test time (min) | share |")
    lines.append("|---|---:|---:|")
    for directory, seconds in sorted(per_dir.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {directory} | {_minutes(seconds)} | {100 * seconds / total:.0f} % |")
    lines.append("")

    lines.append(f"## Per file (the {top} slowest; setup and teardown are mostly fixtures)\n")
    lines.append("| file | tests | setup (s) | call (s) | teardown (s) | total (min) |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    ranked = sorted(per_file.items(), key=lambda kv: -sum(kv[1].values()))
    for path, whens in ranked[:top]:
        row = f"| {path} | {len(counts[path])} | {whens['setup']:.0f} | {whens['call']:.0f} | {whens['teardown']:.0f} |"
        lines.append(f"{row} {_minutes(sum(whens.values()))} |")
    rest = ranked[top:]
    if rest:
        seconds = sum(sum(whens.values()) for _, whens in rest)
        number = sum(len(counts[path]) for path, _ in rest)
        lines.append(f"| {len(rest)} other files | {number} | | | | {_minutes(seconds)} |")
    lines.append("")

    if fixtures:
        lines.append("## Per fixture (its own setups of 0.5 s or more: the fixtures it depends on apart)\n")
        lines.append("| fixture | scope | setups | total (s) | longest (s) | where the longest was |")
        lines.append("|---|---|---:|---:|---:|---|")
        grouped: dict[tuple[str, str], list[FixtureSetup]] = collections.defaultdict(list)
        for f in fixtures:
            grouped[(f.name, f.scope)].append(f)
        for (name, scope), setups in sorted(grouped.items(), key=lambda kv: -sum(f.seconds for f in kv[1]))[:top]:
            longest = max(setups, key=lambda f: f.seconds)
            seconds = sum(f.seconds for f in setups)
            lines.append(
                f"| {name} | {scope} | {len(setups)} | {seconds:.0f} | {longest.seconds:.0f} | {longest.nodeid} |"
            )
        lines.append("")
    else:
        lines.append(f"## The {top} longest setups and teardowns (fixtures)\n")
        lines.append("| phase | seconds | test |")
        lines.append("|---|---:|---|")
        slow = sorted((p for p in phases if p.when != "call"), key=lambda p: -p.seconds)[:top]
        for p in slow:
            lines.append(f"| {p.when} | {p.seconds:.1f} | {p.nodeid} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=pathlib.Path, help="a WARMSTART_TEST_TIMES file or a --durations=0 output")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    phases, fixtures = read(args.run)
    print(report(phases, fixtures, args.top))


if __name__ == "__main__":
    main()
