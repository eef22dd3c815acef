"""The operator's on-CPU profile in the fleet bench: bench/stack_sampler.py around it, and its collapsed stacks read.

python bench/profiles.py bench/out/profile-500x50x25.txt    # the largest shares of one profile
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any


def profiler(out: Path) -> list[str]:
    """bench/stack_sampler.py around the operator: its on-CPU stacks at 20 Hz, written as
    collapsed stacks every 3 s and when the operator exits."""
    return [sys.executable, str(Path(__file__).with_name("stack_sampler.py")), "--out", str(out), "--rate", "20", "--"]


def parse_stacks(raw: str) -> Counter[str]:
    """Collapsed stacks (`frame;frame;... count` lines) as counts by stack."""
    found: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            found[stack] += int(count)
    return found


def stacks(path: Path) -> Counter[str]:
    """The collapsed stacks a profile file holds so far (empty before its first write)."""
    return parse_stacks(path.read_text()) if path.exists() else Counter()


def stack_lines(stacks: Counter[str]) -> str:
    return "".join(f"{stack} {count}\n" for stack, count in stacks.most_common() if count > 0)


def summarize_profile(raw: str, top: int = 30) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """The collapsed stacks' (`frame;frame;... count`) largest shares: warmstart's and kopf's functions counted once
    per sample they are on the stack of (inclusive), and every function's own samples (self, the leaf frame)."""
    total = 0
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    for stack, count in parse_stacks(raw).items():
        total += count
        names = [frame.split(":")[0] + ")" if " (" in frame else frame for frame in stack.split(";")]
        own[names[-1]] = own.get(names[-1], 0) + count
        for name in set(names):
            inclusive[name] = inclusive.get(name, 0) + count

    def ranked(counts: dict[str, int], keep: Any) -> list[tuple[float, str]]:
        best = sorted(counts.items(), key=lambda item: -item[1])
        return [(100 * n / total, name) for name, n in best if keep(name)][:top]

    return ranked(inclusive, lambda name: "warmstart/" in name or "kopf/" in name), ranked(own, lambda _: True)


if __name__ == "__main__":
    ours, leaves = summarize_profile(Path(sys.argv[1]).read_text())
    print("inclusive, warmstart and kopf:")
    for share, name in ours:
        print(f"{share:5.1f}%  {name}")
    print("self, every function:")
    for share, name in leaves:
        print(f"{share:5.1f}%  {name}")
