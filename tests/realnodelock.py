"""The host's real-node lock: one process tree at a time runs a real node here (containerd, kube-proxy's chains).

Real-node tests, demos and benches on a shared machine take ``/tmp/warmstart-realnode.lock`` with ``flock(1)``
(``flock /tmp/warmstart-realnode.lock make test``). A test session takes the same lock itself before its first
real-node test and keeps it to its end, when its real-node cluster stops; a session started under that ``flock``
already holds it through an ancestor process, and takes nothing (taking it again would wait for itself).
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import sys
import time
from typing import IO

PATH = pathlib.Path("/tmp/warmstart-realnode.lock")


def _ancestors() -> set[int]:
    """This process and every process above it."""
    found = set()
    pid = os.getpid()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
    return found


def held_by_an_ancestor(path: pathlib.Path = PATH) -> bool:
    """Whether a flock(2) lock on ``path`` is held by this process or one above it (``/proc/locks``)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    where = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    ancestors = _ancestors()
    for line in pathlib.Path("/proc/locks").read_text().splitlines():
        # "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF"; a waiter's line has "->" after the number
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and int(fields[4]) in ancestors:
            return True
    return False


class RealNodeLock:
    """The lock, taken at most once per process (:meth:`take`) and released at :meth:`release` or exit."""

    def __init__(self, path: pathlib.Path = PATH) -> None:
        self._path = path
        self._handle: IO[str] | None = None
        self._inherited = False

    def take(self) -> None:
        """Take the lock unless this process tree holds it; waits (saying so on stderr) while another holds it."""
        if self._handle is not None or self._inherited:
            return
        if held_by_an_ancestor(self._path):
            self._inherited = True
            return
        handle = self._path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.monotonic()
            print(f"waiting for {self._path} (another real node runs on this host)", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
            print(f"took {self._path} after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        self._handle = handle

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
