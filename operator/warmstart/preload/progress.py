"""Progress of a preload: bytes done of total, throughput and ETA, logged every few seconds (a bar on a TTY)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


class Progress:
    """A thread-safe byte counter with a reporter thread; `add` is called from download threads."""

    def __init__(
        self,
        total: int,
        *,
        interval: float = 5.0,
        stream: TextIO | None = None,
        tty: bool | None = None,
        already: int = 0,
    ) -> None:
        self.total = total
        self.already = already  # bytes kept from an earlier run: counted as done, not in the throughput
        self.done = already
        self.started = time.monotonic()
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n

    def keep(self, n: int) -> None:
        """Bytes of partial files kept from an earlier run: done, but not fetched (nor in the throughput)."""
        with self._lock:
            self.done += n
            self.already += n

    @property
    def fetched(self) -> int:
        """The bytes fetched by this run."""
        with self._lock:
            return self.done - self.already

    def sub(self, n: int) -> None:
        """Take back bytes of a file that is fetched again (after a retry or a failed verification)."""
        with self._lock:
            self.done = max(0, self.done - n)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (self.done - self.already) / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta_s = f"{eta:.0f}s" if eta != float("inf") else "?"
        text = f"{human(self.done)} / {human(self.total)} ({pct:.1f}%) at {human(rate)}/s, ETA {eta_s}"
        if self.tty:
            width = 30
            filled = int(width * min(pct, 100.0) / 100)
            return f"[{'#' * filled}{'.' * (width - filled)}] {text}"
        return f"progress: {text}"

    def _run(self) -> None:
        while not self._stop.wait(self.interval if not self.tty else 0.5):
            self._emit()

    def _emit(self, end: str = "") -> None:
        if self.tty:
            self.stream.write("\r" + self.line() + end)
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="preload-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._emit(end="\n")
