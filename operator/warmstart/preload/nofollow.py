"""File system steps in the node cache that never follow a symlink: a planted link cannot redirect a write or delete.

Rules (docs/security-caches.md): below the cache root nothing warmstart opens, creates, renames or removes is reached
through a symlink. A link found where warmstart keeps its own directories or files (`.staging-<key>`, `.lock-<key>`,
a part file, the journal) is removed (the link itself, never its target) and replaced by a real one; a link at the
shared `warmstart/weights` level is refused with PathEscape. Files are opened with O_NOFOLLOW, and directories are
created one component at a time with each component checked by lstat.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from warmstart.api.preloading import Reason
from warmstart.preload.results import PreloadError


def _escape(path: str, what: str) -> PreloadError:
    return PreloadError(Reason.PATH_ESCAPE, f"refusing {path}: {what}; warmstart never follows links in the cache")


def drop_link(path: str) -> None:
    """Remove a symlink at `path` (not its target); anything else is left alone."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            os.unlink(path)


def real_dir(path: str, *, replace_link: bool) -> None:
    """Make `path` a real directory: create it, or (with `replace_link`) replace a symlink or file found there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        mode = os.lstat(path).st_mode
    if stat.S_ISDIR(mode):
        return
    if not replace_link:
        raise _escape(path, "it is a symlink or not a directory")
    os.unlink(path)
    os.mkdir(path)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise _escape(path, "it changed while being replaced")


def makedirs_inside(base: str, path: str, *, replace_link: bool = True) -> None:
    """Create `path` (at or below the real directory `base`) one real directory at a time."""
    rel = os.path.relpath(path, base)
    if rel == ".":
        return
    if rel.startswith(".."):
        raise _escape(path, f"it is outside {base}")
    current = base
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        real_dir(current, replace_link=replace_link)


def open_fd(path: str, flags: int, mode: int = 0o644) -> int:
    """os.open that refuses a symlink as the last component (O_NOFOLLOW)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _escape(path, "it is a symlink") from exc
        raise


def open_write(path: str) -> int:
    """A fresh file at `path` for writing: a symlink there is removed first, never written through."""
    drop_link(path)
    return open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


def regular_size(base: str, rel: str) -> int | None:
    """The size of the regular file `base/rel` reached without any symlink, else None."""
    current = base
    parts = rel.split("/")
    try:
        for part in parts[:-1]:
            current = os.path.join(current, part)
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return None
        st = os.lstat(os.path.join(current, parts[-1]))
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def check_dir(path: str) -> None:
    """Open the directory `path` with O_NOFOLLOW | O_DIRECTORY: it is a real directory right now, not a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _escape(path, "it is a symlink or not a directory") from exc
        raise
    os.close(fd)


def is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
