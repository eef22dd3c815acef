"""A low-rate, CPU-weighted stack sampler that runs a Python module in its own process (the operator, in
bench/fleet_scale.py --profile).

    python bench/stack_sampler.py --out profile.txt --rate 10 -- python -m warmstart.cli operator ...

A daemon thread, `rate` times a second, reads every thread's CPU ticks (/proc/self/task/<tid>/stat) and adds the
ticks a thread used since the last look to that thread's current Python stack (`sys._current_frames`). Threads that
used no CPU cost nothing, so the profile is on-CPU time, in ticks of 10 ms, attributed to where each thread was when
it was looked at: a statistical picture, like any sampler's. The output, written every 10 s and at exit, is collapsed
stacks (`thread;frame;...;frame ticks`, root first), the format of py-spy's raw output, so
`fleet_scale.summarize_profile` reads both. Its own thread is in the profile too (`thread stack-sampler`); py-spy at
20 Hz took 1.4 cores of these 2 and, stopped with its child, wrote nothing.
"""

from __future__ import annotations

import argparse
import atexit
import os
import runpy
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

WRITE_EVERY_S = 10.0


def thread_ticks(tid: int) -> int:
    """utime + stime of one thread of this process, in clock ticks (0 once the thread is gone)."""
    try:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rpartition(")")[2].split()  # the name in parentheses may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


def collapsed(frame: FrameType | None) -> str:
    """`function (file:line)` frames, root first, joined by `;`."""
    names: list[str] = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_name} ({code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return ";".join(reversed(names))


class Sampler:
    def __init__(self, out: Path, rate: float) -> None:
        self.out = out
        self.interval = 1.0 / rate
        self.stacks: Counter[str] = Counter()
        self.last_ticks: dict[int, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def sample(self) -> None:
        frames = sys._current_frames()
        for thread in threading.enumerate():  # this thread too: the profile shows what sampling costs
            if thread.native_id is None:
                continue
            ticks = thread_ticks(thread.native_id)
            used = ticks - self.last_ticks.get(thread.native_id, ticks)
            self.last_ticks[thread.native_id] = ticks
            if used > 0 and thread.ident in frames:
                with self.lock:
                    self.stacks[f"thread {thread.name};{collapsed(frames[thread.ident])}"] += used

    def write(self) -> None:
        with self.lock:
            text = "".join(f"{stack} {count}\n" for stack, count in self.stacks.most_common())
        partial = self.out.with_suffix(self.out.suffix + ".part")
        partial.write_text(text)
        partial.replace(self.out)

    def run(self) -> None:
        written = time.monotonic()
        while not self.stop.wait(self.interval):
            self.sample()
            if time.monotonic() - written > WRITE_EVERY_S:
                self.write()
                written = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self.run, name="stack-sampler", daemon=True).start()
        atexit.register(self.write)


def module_and_args(command: list[str]) -> tuple[str, list[str]]:
    """`[python] -m module args...` -> (module, args)."""
    if command and command[0] != "-m":
        command = command[1:]
    if len(command) < 2 or command[0] != "-m":
        raise SystemExit("stack_sampler runs `python -m module ...` only")
    return command[1], command[2:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="collapsed stacks file")
    parser.add_argument("--rate", type=float, default=10.0, help="looks per second (default 10)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python -m module args...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    module, rest = module_and_args(command)
    Sampler(args.out, args.rate).start()
    sys.argv = [module, *rest]
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
