"""The node cache on disk: layout, locking, resumable staging, atomic publish, manifest and delete.

Layout under the host path `root`:

    <root>/warmstart/weights/<key>/                      the published cache, with .warmstart-manifest.json
    <root>/warmstart/weights/.staging-<key>/             downloads in progress (kept across a kill)
    <root>/warmstart/weights/.lock-<key>                 flock(2) held by the one preload or delete of <key>

A directory without a valid manifest is never complete: the manifest is written last inside the
staging directory, everything is fsynced, and only then is the staging directory renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from typing import Any

from warmstart.api.preloading import CACHE_DIR_NAME, Reason
from warmstart.preload.results import PreloadError

log = logging.getLogger(__name__)

KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MANIFEST_NAME = ".warmstart-manifest.json"
JOURNAL_NAME = ".warmstart-journal.jsonl"
PART_SUFFIX = ".warmstart-part"
TMP_DIR_NAME = ".warmstart-tmp"
MANIFEST_FORMAT = 1

#: Free space kept beyond the model: the larger of 1 GB and 5% of the bytes still to write.
MARGIN_MIN_BYTES = 1_000_000_000  # the operator's placement check uses the same 1 GB and 5%
MARGIN_FRACTION = 0.05


def validate_key(key: str) -> str:
    if not KEY_PATTERN.match(key):
        raise PreloadError(Reason.INVALID_SOURCE, f"cache key {key!r} must match {KEY_PATTERN.pattern}")
    return key


def safe_relpath(path: str) -> str:
    """A file path from a source, checked to stay inside the cache directory once joined."""
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise PreloadError(
            Reason.PATH_ESCAPE, f"refusing source path {path!r}: empty, absolute or with '.'/'..' segments"
        )
    if parts[0].startswith(".warmstart") or parts[-1].endswith(PART_SUFFIX):
        raise PreloadError(Reason.PATH_ESCAPE, f"refusing source path {path!r}: it collides with warmstart's own files")
    return "/".join(parts)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one cache key lives under a root."""

    root: str
    key: str

    @property
    def weights_dir(self) -> str:
        return os.path.join(self.root, CACHE_DIR_NAME, "weights")

    @property
    def final(self) -> str:
        return os.path.join(self.weights_dir, self.key)

    @property
    def staging(self) -> str:
        return os.path.join(self.weights_dir, f".staging-{self.key}")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.weights_dir, f".lock-{self.key}")

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.final, MANIFEST_NAME)


def layout(root: str, key: str) -> Layout:
    return Layout(root=os.path.abspath(root), key=validate_key(key))


# --- capacity -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Capacity:
    needed: int
    margin: int
    available: int

    @property
    def fits(self) -> bool:
        return self.needed + self.margin <= self.available


def margin(needed: int) -> int:
    return max(MARGIN_MIN_BYTES, int(needed * MARGIN_FRACTION))


def free_bytes(path: str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = statvfs(path)
    return st.f_bavail * st.f_frsize


def check_capacity(needed: int, path: str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> Capacity:
    """Raise InsufficientCapacity unless `needed` bytes plus the margin fit on `path`'s filesystem."""
    capacity = Capacity(needed=needed, margin=margin(needed), available=free_bytes(path, statvfs))
    if not capacity.fits:
        raise PreloadError(
            Reason.INSUFFICIENT_CAPACITY,
            f"the model needs {capacity.needed} bytes (+{capacity.margin} margin) but only {capacity.available} bytes "
            f"are available on the filesystem of {path} "
            f"({_gib(capacity.needed)} needed, {_gib(capacity.available)} free)",
        )
    return capacity


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


# --- locking --------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(lay: Layout) -> Iterator[None]:
    """Hold the key's lock; a second preload of the same key waits here for the first one."""
    os.makedirs(lay.weights_dir, exist_ok=True)
    fd = os.open(lay.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another preload of %s holds the lock; waiting for it", lay.key)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock; the lock file stays, so no unlink race


# --- the published cache --------------------------------------------------------------------------------------------


def read_manifest(lay: Layout) -> dict[str, Any] | None:
    """The manifest if the published directory is complete, else None. Stats files, reads no data."""
    try:
        with open(lay.manifest_path, encoding="utf-8") as f:
            manifest: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        return None
    if manifest.get("formatVersion") != MANIFEST_FORMAT or manifest.get("key") != lay.key:
        return None
    try:
        for entry in manifest["files"]:
            if os.stat(os.path.join(lay.final, safe_relpath(entry["path"]))).st_size != entry["size"]:
                return None
    except (OSError, KeyError, TypeError, PreloadError):
        return None
    return manifest


def build_manifest(
    lay: Layout, source: dict[str, Any], files: list[dict[str, Any]], extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "formatVersion": MANIFEST_FORMAT,
        "key": lay.key,
        "source": source,
        "completedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "totalBytes": sum(f["size"] for f in files),
        "files": sorted(files, key=lambda f: str(f["path"])),
        **extra,
    }


# --- staging --------------------------------------------------------------------------------------------------------


class Staging:
    """The staging directory of one key: a journal of verified files, and the publish step."""

    def __init__(self, lay: Layout) -> None:
        self.lay = lay
        self.dir = lay.staging
        os.makedirs(self.dir, exist_ok=True)
        self._journal: dict[str, dict[str, Any]] = self._read_journal()

    def _read_journal(self) -> dict[str, dict[str, Any]]:
        entries: dict[str, dict[str, Any]] = {}
        try:
            with open(os.path.join(self.dir, JOURNAL_NAME), encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        entries[entry["path"]] = entry
                    except (ValueError, KeyError, TypeError):
                        continue  # a line torn by a kill: that file is simply fetched again
        except FileNotFoundError:
            pass
        return entries

    def path(self, rel: str) -> str:
        return os.path.join(self.dir, safe_relpath(rel))

    def part_path(self, rel: str) -> str:
        return self.path(rel) + PART_SUFFIX

    def tmp_dir(self, name: str) -> str:
        path = os.path.join(self.dir, TMP_DIR_NAME, name)
        os.makedirs(path, exist_ok=True)
        return path

    def journaled(self, rel: str, fingerprint: dict[str, Any]) -> bool:
        """Whether `rel` was verified in an earlier run for the same remote version and is still on disk whole."""
        entry = self._journal.get(rel)
        if entry is None or entry.get("fingerprint") != fingerprint:
            return False
        try:
            return bool(os.stat(self.path(rel)).st_size == fingerprint["size"])
        except OSError:
            return False

    def forget(self, rel: str) -> None:
        self._journal.pop(rel, None)
        for path in (self.path(rel), self.part_path(rel)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def commit_file(self, rel: str, fingerprint: dict[str, Any]) -> None:
        """fsync a verified part file, rename it to its name, and journal it (the order matters)."""
        part, final = self.part_path(rel), self.path(rel)
        fsync_path(part)
        os.replace(part, final)
        line = json.dumps({"path": rel, "fingerprint": fingerprint}) + "\n"
        with open(os.path.join(self.dir, JOURNAL_NAME), "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._journal[rel] = {"path": rel, "fingerprint": fingerprint}

    def sweep(self, keep: set[str]) -> None:
        """Remove every staged file that is not one of `keep` (leftovers of another version, stray parts)."""
        for dirpath, dirnames, filenames in os.walk(self.dir, topdown=True):
            rel_dir = os.path.relpath(dirpath, self.dir)
            if rel_dir == TMP_DIR_NAME or rel_dir.startswith(TMP_DIR_NAME + os.sep):
                dirnames[:] = []
                continue
            for name in filenames:
                rel = name if rel_dir == "." else os.path.join(rel_dir, name).replace(os.sep, "/")
                if rel in (JOURNAL_NAME, MANIFEST_NAME) or rel in keep:
                    continue
                os.unlink(os.path.join(dirpath, name))

    def publish(self, manifest: dict[str, Any]) -> None:
        """Write the manifest last, fsync everything, and rename the staging directory into place."""
        shutil.rmtree(os.path.join(self.dir, TMP_DIR_NAME), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir, JOURNAL_NAME))
        manifest_tmp = os.path.join(self.dir, MANIFEST_NAME + ".tmp")
        with open(manifest_tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(manifest_tmp, os.path.join(self.dir, MANIFEST_NAME))
        for dirpath, _, _ in os.walk(self.dir):
            fsync_path(dirpath)
        old = None
        if os.path.lexists(self.lay.final):
            old = os.path.join(self.lay.weights_dir, f".old-{self.lay.key}-{os.getpid()}")
            os.replace(self.lay.final, old)
        os.replace(self.dir, self.lay.final)
        fsync_path(self.lay.weights_dir)
        if old is not None:
            _remove(old)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- delete ---------------------------------------------------------------------------------------------------------


def delete(root: str, key: str) -> bool:
    """Remove the cache and staging of `key` under `root`, never anything outside; True if something was removed."""
    lay = layout(root, key)  # a validated key has no '/' or '..', so the paths below are lexically inside root
    if not os.path.isdir(lay.weights_dir):
        return False
    weights, real_root = os.path.realpath(lay.weights_dir), os.path.realpath(lay.root)
    if os.path.commonpath([weights, real_root]) != real_root:
        raise PreloadError(
            Reason.PATH_ESCAPE, f"refusing to delete under {lay.weights_dir}: it resolves outside {lay.root}"
        )
    removed = False
    with locked(lay):
        for path in (lay.final, lay.staging):
            if not os.path.lexists(path):
                continue
            doomed = os.path.join(lay.weights_dir, f".deleting-{key}-{os.getpid()}")
            os.replace(path, doomed)  # the cache disappears atomically; the bytes go after
            _remove(doomed)
            removed = True
        fsync_path(lay.weights_dir)
    return removed


def _remove(path: str) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)  # a symlink is removed, never followed
        return
    shutil.rmtree(path)


def is_enospc(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)
