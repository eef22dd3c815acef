"""A low-rate, on-CPU stack sampler that runs a Python module in its own process (the operator, in
bench/fleet_scale.py --profile).

    python bench/stack_sampler.py --out profile.txt --rate 20 -- python -m warmstart.cli operator ...

A daemon thread, `rate` times a second, looks at every thread's current Python stack (`sys._current_frames`) and
counts it once when the thread is working: it used CPU since the last look (its ticks in /proc/self/task/<tid>/stat
grew) and it is not waiting where it stands (in `select`, a socket or TLS read, a lock, a queue or a thread pool's
idle wait, a sleep). A thread that used CPU but is caught waiting did its work between two looks; those samples are
counted under `(waiting since)`, so the share the profile cannot place is visible. The output, written every 3 s
and at exit, is collapsed stacks (`thread;frame;...;frame count`, root first), the format of py-spy's raw output, so
`profiles.summarize_profile` reads both. Its own thread is left out (it is always caught working); py-spy at
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

WRITE_EVERY_S = 3.0
#: (file name ending, function) of the frames a thread waits in without using the CPU
WAITS = frozenset(
    {
        ("selectors.py", "select"),
        ("ssl.py", "read"),
        ("ssl.py", "recv_into"),
        ("socket.py", "readinto"),
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("thread.py", "_worker"),
        ("queue.py", "get"),
        ("tasks.py", "sleep"),
    }
)


def waiting(frame: FrameType) -> bool:
    """Whether the innermost frame is a wait (`frame` is the innermost)."""
    code = frame.f_code
    return any(code.co_filename.endswith(name) and code.co_name == function for name, function in WAITS)


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
        me = threading.get_ident()
        for thread in threading.enumerate():
            if thread.native_id is None or thread.ident == me:  # it is always caught working: left out
                continue
            ticks = thread_ticks(thread.native_id)
            used = ticks - self.last_ticks.get(thread.native_id, ticks)
            self.last_ticks[thread.native_id] = ticks
            frame = frames.get(thread.ident)
            if used <= 0 or frame is None:
                continue
            stack = "(waiting since)" if waiting(frame) else collapsed(frame)
            with self.lock:
                self.stacks[f"thread {thread.name};{stack}"] += 1

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
    parser.add_argument("--rate", type=float, default=20.0, help="looks per second (default 20)")
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
