"""Bind mounts and the cache directory's owner: the node side of the CSI driver (root, mount(2) through libc).

- A cache reaches a pod as a bind mount of one node directory onto the kubelet's target path, remounted read-only
  (readers) and always `nosuid,nodev`. The target lies under the kubelet's pods directory, which the driver's
  container mounts with Bidirectional propagation, so the mount shows in the pod.
- Nothing on the way to a cache directory may be a symlink: each component below the cache root is opened with
  O_NOFOLLOW from its parent's descriptor, and the bind's source is the final descriptor (`/proc/self/fd/N`), so a
  writer that plants `weights/<key> -> /etc`, before or during the check, never gets the node's /etc into a pod.
- The writable `<root>/warmstart` (and `weights/`) is created here, owned by the cache uid, so no pod needs a root
  step to hand it over. A tree still owned by root (written by an older, root-writing version) is handed over once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import posixpath
import stat

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class PathError(RuntimeError):
    """A cache path that is missing or not a plain directory; `missing` tells which."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def is_mount_point(path: str) -> bool:
    """Whether `path` is mounted on (its device differs from its parent's, or it is listed in mountinfo)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
            return any(line.split()[4] == path for line in mounts)
    except OSError:
        return False


def plain_directory(root: str, path: str) -> None:
    """Raise PathError unless every component of `path` below `root` is a real directory (no symlink)."""
    relative = posixpath.relpath(path, root)
    if relative.startswith(".."):
        raise PathError(f"{path} is not under {root}", missing=False)
    current = root
    for part in [p for p in relative.split("/") if p not in ("", ".")]:
        current = posixpath.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise PathError(f"{current} does not exist", missing=True) from None
        if not stat.S_ISDIR(mode):
            raise PathError(f"{current} is not a directory (a symlink or a file)", missing=False)


def open_plain(root: str, path: str) -> int:
    """An O_PATH descriptor of `path`, reached from `root` one component at a time without following any link.

    Binding `/proc/self/fd/<fd>` mounts exactly the directory that was checked: a link swapped in after the check
    (a race with a writer of the cache) is never followed. The caller closes the descriptor.
    """
    relative = posixpath.relpath(path, root)
    if relative.startswith(".."):
        raise PathError(f"{path} is not under {root}", missing=False)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    current = root
    try:
        for part in [p for p in relative.split("/") if p not in ("", ".")]:
            current = posixpath.join(current, part)
            try:
                found = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                raise PathError(f"{current} does not exist", missing=True) from None
            except OSError as error:  # ELOOP / ENOTDIR: a link or a file
                raise PathError(f"{current} is not a directory ({error.strerror})", missing=False) from None
            os.close(fd)
            fd = found
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind(source: str, target: str, *, read_only: bool) -> None:
    """Bind-mount `source` on `target` (created if missing), then remount it nosuid,nodev (and read-only)."""
    os.makedirs(target, mode=0o750, exist_ok=True)
    if is_mount_point(target):
        return
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None), f"bind {source} on {target}")
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    try:
        _check(_libc.mount(None, target.encode(), None, flags, None), f"remount {target}")
    except OSError:
        _libc.umount2(target.encode(), MNT_DETACH)
        raise


def unbind(target: str) -> None:
    """Unmount `target` if mounted and remove the empty directory; a target already gone is fine."""
    if is_mount_point(target):
        _check(_libc.umount2(target.encode(), 0), f"unmount {target}")
    try:
        os.rmdir(target)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno != errno.ENOTEMPTY:
            raise


def make_plain_dirs(root: str, path: str) -> None:
    """Create the directories from `root` down to `path` (root-owned, 0755), each checked not to be a link."""
    current = root
    for part in [p for p in posixpath.relpath(path, root).split("/") if p not in ("", ".")]:
        if part == "..":
            raise PathError(f"{path} is not under {root}", missing=False)
        current = posixpath.join(current, part)
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        plain_directory(root, current)


def own_key_dir(root: str, key_dir: str, legacy: str, uid: int) -> None:
    """Create the key's tree `key_dir` under `root`, owned by `uid`; the directories above it stay root's.

    A copy the earlier layout published at `legacy` (`<root>/warmstart/weights/<key>`) becomes the tree's `model/`
    instead of being downloaded again. A tree that root still owns (an older, root-writing version) is handed over
    recursively, without following links.
    """
    make_plain_dirs(root, posixpath.dirname(key_dir))
    try:
        os.mkdir(key_dir, 0o755)
        os.chown(key_dir, uid, uid, follow_symlinks=False)
        fresh = True
    except FileExistsError:
        fresh = False
    plain_directory(root, key_dir)
    model = posixpath.join(key_dir, "model")
    if fresh and not os.path.lexists(model):
        try:
            plain_directory(root, legacy)
            os.rename(legacy, model)
        except PathError:
            pass
    if os.lstat(key_dir).st_uid == uid and not fresh:
        return
    for directory, subdirs, files in os.walk(key_dir, followlinks=False):
        for name in [directory, *(posixpath.join(directory, n) for n in subdirs + files)]:
            os.chown(name, uid, uid, follow_symlinks=False)
