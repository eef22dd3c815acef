"""Looking into and cleaning up a real node's containerd with ``ctr`` (Debian's containerd ships it).

The kubelet normally stops every container itself; these are for when it could not: kill and delete
what is left, and the runc shims that outlive containerd.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

from warmstart.localcluster import nodeplans


def ctr(node: nodeplans.NodePlan, *args: str) -> list[str]:
    command = ["ctr", "--address", str(node.containerd_socket), "--namespace", "k8s.io", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.split() if done.returncode == 0 else []


def answers(node: nodeplans.NodePlan) -> bool:
    if not node.containerd_socket.exists():
        return False
    command = ["ctr", "--address", str(node.containerd_socket), "version"]
    return subprocess.run(command, capture_output=True, timeout=10, check=False).returncode == 0


def kill_containers(node: nodeplans.NodePlan) -> None:
    """Kill and delete whatever containers (sandboxes included) the kubelet did not stop."""
    tasks = ctr(node, "tasks", "list", "--quiet")
    for task in tasks:
        ctr(node, "tasks", "kill", "--signal", "SIGKILL", task)
    for task in tasks:
        ctr(node, "tasks", "delete", "--force", task)
    for container in ctr(node, "containers", "list", "--quiet"):
        ctr(node, "containers", "delete", container)


def kill_shims(node: nodeplans.NodePlan) -> None:
    """SIGKILL the runc shims that this node's containerd started (they outlive containerd)."""
    socket = str(node.containerd_socket)
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and socket.encode() in argv:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
