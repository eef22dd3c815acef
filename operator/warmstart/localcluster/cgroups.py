"""Creating and removing a cgroup subtree in every mounted cgroup hierarchy (v1 controllers and the unified one).

Each real kubelet gets its own ``cgroupRoot`` (``/warmstart/<node>``): two kubelets sharing
``/kubepods`` would fight over it. The kubelet wants that root to exist, and leaves its
``kubepods`` tree under it when it stops, so ``up`` creates it and ``down`` removes it.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time


def hierarchies() -> list[pathlib.Path]:
    """Mount points of every cgroup (v1) and cgroup2 filesystem, from /proc/self/mountinfo."""
    found: list[pathlib.Path] = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fstype = after.split()[0] if after else ""
        if fstype in ("cgroup", "cgroup2"):
            found.append(pathlib.Path(_unescape(before.split()[4])))
    return found


def create(path: str) -> None:
    """``mkdir -p`` the absolute cgroup ``path`` in every hierarchy; new cpuset levels inherit cpus and mems."""
    relative = path.strip("/")
    for hierarchy in hierarchies():
        current = hierarchy
        for part in relative.split("/"):
            parent, current = current, current / part
            if not current.is_dir():
                current.mkdir()
                _inherit_cpuset(parent, current)


def remove(path: str, timeout: float = 10.0) -> list[pathlib.Path]:
    """Remove the cgroup ``path`` and everything under it in every hierarchy, killing processes still inside;
    return the directories that could not be removed."""
    left: list[pathlib.Path] = []
    for hierarchy in hierarchies():
        top = hierarchy / path.strip("/")
        if top.is_dir():
            left += _remove_tree(top, time.monotonic() + timeout)
    parent = pathlib.PurePosixPath(path).parent
    if str(parent) != "/":
        for hierarchy in hierarchies():  # the shared parent (/warmstart) once it is empty
            try:
                (hierarchy / str(parent).strip("/")).rmdir()
            except OSError:
                pass
    return left


def find(name: str) -> list[pathlib.Path]:
    """Every cgroup directory called ``name`` in any hierarchy (e.g. ``kubepods``)."""
    found: list[pathlib.Path] = []
    for hierarchy in hierarchies():
        found += [pathlib.Path(root) / name for root, dirs, _ in os.walk(hierarchy) if name in dirs]
    return found


def _remove_tree(top: pathlib.Path, deadline: float) -> list[pathlib.Path]:
    while True:
        left: list[pathlib.Path] = []
        for root, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            directory = pathlib.Path(root)
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                _kill_members(directory)
                left.append(directory)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _kill_members(directory: pathlib.Path) -> None:
    """SIGKILL the processes still in ``directory`` (containers of ours whose runtime is gone)."""
    try:
        pids = [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _inherit_cpuset(parent: pathlib.Path, child: pathlib.Path) -> None:
    for name in ("cpuset.cpus", "cpuset.mems"):
        if (child / name).is_file() and not (child / name).read_text().strip():
            (child / name).write_text((parent / name).read_text())


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape") if "\\" in field else field
