"""Starting, recognising and stopping the cluster's long-running processes, tracked by PID.

Processes run in their own session, so they outlive the ``warmstart cluster up`` that started
them and a Ctrl-C in that terminal does not reach them. A PID only counts as ours while
``/proc/<pid>/exe`` is still the binary we started, so a recycled PID is never signalled.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import socket
import subprocess
import time
from collections.abc import Collection, Iterable, Mapping, Sequence

#: the kernel's range of ephemeral ports, which outgoing connections take their source port from
EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
#: the lowest port chosen below the ephemeral range
LOWEST_PORT = 10000


def _ephemeral_low(source: pathlib.Path = EPHEMERAL_RANGE) -> int:
    try:
        return int(source.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(taken: Collection[int] = (), ephemeral_low: int | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that is not in ``taken``.

    Chosen below the kernel's ephemeral range when there is room: a port from that range (what binding port 0 gives)
    can be taken by any outgoing connection's source port between this choice and the server's own bind, and the
    server then fails with "address already in use".
    """
    low = _ephemeral_low() if ephemeral_low is None else ephemeral_low
    if low > LOWEST_PORT + 1000:
        for _ in range(1000):
            port = random.randrange(LOWEST_PORT, low)
            if port not in taken and _bindable(port):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """One distinct free port per name (see :func:`free_port`)."""
    chosen: dict[str, int] = {}
    for name in names:
        chosen[name] = free_port(taken=set(chosen.values()))
    return chosen


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
