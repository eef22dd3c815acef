"""Finding and unmounting the mounts a real node leaves under its directories.

The kubelet bind-mounts its root dir onto itself (shared propagation) and mounts each pod's
volumes (tmpfs for service-account tokens) under it; containerd mounts each container's overlay
rootfs, the sandboxes' /dev/shm and the pod network namespaces under its state dir.
"""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Iterable


def mountpoints() -> list[pathlib.Path]:
    """Every mount point, in mount order (from /proc/self/mountinfo)."""
    points: list[pathlib.Path] = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.append(pathlib.Path(field.encode().decode("unicode_escape") if "\\" in field else field))
    return points


def under(prefixes: Iterable[pathlib.Path]) -> list[pathlib.Path]:
    """Mount points at or below any of ``prefixes``, latest mounted first."""
    roots = [prefix.resolve() for prefix in prefixes]
    return [point for point in reversed(mountpoints()) if any(point == root or root in point.parents for root in roots)]


def unmount_under(prefixes: Iterable[pathlib.Path], rounds: int = 5) -> list[pathlib.Path]:
    """Unmount everything below ``prefixes`` (last mounted first; lazily if busy); return what is still mounted."""
    prefixes = list(prefixes)
    for attempt in range(rounds):
        left = under(prefixes)
        if not left:
            return []
        lazy = attempt >= rounds - 2
        for point in left:
            subprocess.run(["umount", *(["--lazy"] if lazy else []), str(point)], capture_output=True, check=False)
    return under(prefixes)
