"""Starting, recognising and stopping the cluster's long-running processes, tracked by PID.

Processes run in their own session, so they outlive the ``warmstart cluster up`` that started
them and a Ctrl-C in that terminal does not reach them. A PID only counts as ours while
``/proc/<pid>/exe`` is still the binary we started, so a recycled PID is never signalled.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spawn(argv: Sequence[str], log_path: pathlib.Path, env: Mapping[str, str] | None = None) -> int:
    """Start ``argv`` detached, appending stdout and stderr to ``log_path``; return its PID."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    return process.pid


def alive(pid: int, binary: str | os.PathLike[str]) -> bool:
    """Whether ``pid`` is a live (not zombie) process running ``binary``."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    if state in (b"Z", b"X"):
        return False
    return exe.removesuffix(" (deleted)") == os.fspath(pathlib.Path(binary).resolve())


def stop(pid: int, binary: str | os.PathLike[str], grace_seconds: float = 10.0) -> bool:
    """SIGTERM ``pid`` if it still runs ``binary``, SIGKILL it after the grace period; True if it ran."""
    if not alive(pid, binary):
        return False
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid, binary):
            return True
        time.sleep(0.1)
    _signal(pid, signal.SIGKILL)
    while alive(pid, binary):
        _reap(pid)
        time.sleep(0.05)
    return True


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child (it is when ``up`` ran in this process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
