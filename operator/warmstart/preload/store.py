"""The node cache on disk: layout, locking, resumable staging, atomic publish, manifest and delete.

Layout under the host path `root`: one tree per key, and nothing of a key outside it, so a writer that the CSI
driver gives only `<root>/warmstart/keys/<key>/` does all its work there:

    <root>/warmstart/keys/<key>/model/                   the published cache, with .warmstart-manifest.json
    <root>/warmstart/keys/<key>/.staging/                downloads in progress (kept across a kill)
    <root>/warmstart/keys/<key>/.lock                    flock(2) held by the one preload or delete of <key>
    <root>/warmstart/keys/<key>/.results/<pod uid>.json  a writer's proof result, for the CSI driver

A directory without a valid manifest is never complete: the manifest is written last inside the
staging directory, everything is fsynced, and only then is the staging directory renamed into place.
Caches of the earlier layout (`<root>/warmstart/weights/<key>/`) are moved into their key's tree, not downloaded
again: by the CSI driver before a writer's mount, or by a preload that holds the whole cache directory (hostPath).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from warmstart.api import cachemanifests, preloading
from warmstart.api.cachemanifests import CacheManifest, Identity
from warmstart.api.preloading import CACHE_DIR_NAME, Reason
from warmstart.preload import nofollow
from warmstart.preload.results import PreloadError

log = logging.getLogger(__name__)

KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
#: a pod's uid as the API server writes it
_POD_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MANIFEST_NAME = ".warmstart-manifest.json"
JOURNAL_NAME = ".warmstart-journal.jsonl"
PART_SUFFIX = ".warmstart-part"
TMP_DIR_NAME = ".warmstart-tmp"
MANIFEST_FORMAT = cachemanifests.FORMAT_VERSION

#: Free space kept beyond the model: the larger of 1 GB and 5% of the bytes still to write.
MARGIN_MIN_BYTES = 1_000_000_000  # the operator's placement check uses the same 1 GB and 5%
MARGIN_FRACTION = 0.05


def validate_key(key: str) -> str:
    if not KEY_PATTERN.match(key):
        raise PreloadError(Reason.INVALID_SOURCE, f"cache key {key!r} must match {KEY_PATTERN.pattern}")
    return key


def safe_relpath(path: str) -> str:
    """A file path from a source, checked to stay inside the cache directory once joined.

    Only '/' separates: a backslash is an ordinary character of a name (S3 keys `a\\b` and `a/b` stay distinct)."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise PreloadError(
            Reason.PATH_ESCAPE, f"refusing source path {path!r}: empty, absolute or with '.'/'..' segments"
        )
    if parts[0].startswith(".warmstart") or parts[-1].endswith(PART_SUFFIX):
        raise PreloadError(Reason.PATH_ESCAPE, f"refusing source path {path!r}: it collides with warmstart's own files")
    return "/".join(parts)


def check_tree(paths: Iterable[str]) -> None:
    """Refuse a listing where one path is a file and also a directory of another (`a` and `a/b`): no tree holds both."""
    files = set(paths)
    for path in sorted(files):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in files:
                raise PreloadError(
                    Reason.INVALID_SOURCE,
                    f"the source holds both a file {parent!r} and a file under it ({path!r}); a directory cannot also "
                    "be a file: rename or remove one of them at the source",
                )


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one cache key lives under a root: its own tree, `<root>/warmstart/keys/<key>`."""

    root: str
    key: str

    @property
    def key_dir(self) -> str:
        return preloading.key_dir(self.root, self.key)

    @property
    def final(self) -> str:
        return os.path.join(self.key_dir, preloading.MODEL_DIR_NAME)

    @property
    def staging(self) -> str:
        return os.path.join(self.key_dir, ".staging")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.key_dir, ".lock")

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.final, MANIFEST_NAME)

    @property
    def results_dir(self) -> str:
        return os.path.join(self.key_dir, preloading.RESULTS_DIR_NAME)

    @property
    def legacy(self) -> str:
        """Where the earlier layout published the key: `<root>/warmstart/weights/<key>`."""
        return preloading.legacy_model_dir(self.root, self.key)


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


#: errors of a step at one of warmstart's own names that mean someone else (root) put something there
TAMPER_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ENOTEMPTY})


def cache_tampered(path: str, error: OSError) -> PreloadError:
    """The retryable CacheTampered failure of a step the non-root preload cannot take at one of its own names."""
    target = str(error.filename or path)
    found = ""
    for candidate, what in ((target, "found {kind} owned by uid {uid}"), (os.path.dirname(target), "in {kind}")):
        try:
            st = os.lstat(candidate)
        except OSError:
            continue
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a file or link"
        if candidate != target:
            kind = f"a directory owned by uid {st.st_uid} that the preload's uid {os.geteuid()} cannot write"
        found = " (" + what.format(kind=kind, uid=st.st_uid) + ")"
        break
    return PreloadError(
        Reason.CACHE_TAMPERED,
        f"{target}: {error.strerror}{found}: something other than warmstart put it in the cache and the preload "
        "cannot remove it; the node's admin should remove it. Retrying.",
    )


@contextlib.contextmanager
def guarded(path: str) -> Iterator[None]:
    """Turn a permission or type error at warmstart's own names under `path` into CacheTampered (retryable)."""
    try:
        yield
    except OSError as exc:
        if exc.errno in TAMPER_ERRNOS:
            raise cache_tampered(path, exc) from exc
        raise


def ensure_key_dir(lay: Layout) -> None:
    """Create the key's tree as real directories, none reached through a link: a symlink on the way is refused
    (PathEscape); a root-owned directory there that refuses the writer is CacheTampered.

    Through the CSI driver the tree is the pod's mount and already there; with the whole cache directory (hostPath),
    the key's copy of the earlier layout moves into it first."""
    os.makedirs(lay.root, exist_ok=True)  # the admin's root (in a pod: a parent of the mount)
    with guarded(lay.key_dir):
        nofollow.makedirs_inside(lay.root, lay.key_dir, replace_link=False)
        nofollow.check_dir(os.path.join(lay.root, CACHE_DIR_NAME))
        _adopt_legacy(lay)


def _adopt_legacy(lay: Layout) -> None:
    """Move `<root>/warmstart/weights/<key>` (the earlier layout) to the key's `model/` when that is free."""
    if os.path.lexists(lay.final) or not nofollow.is_real_dir(os.path.dirname(lay.legacy)):
        return
    if nofollow.is_real_dir(lay.legacy):
        log.info("moving %s, published by an earlier version, to %s", lay.legacy, lay.final)
        os.rename(lay.legacy, lay.final)


# --- locking --------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(lay: Layout) -> Iterator[None]:
    """Hold the key's lock; a second preload of the same key waits here for the first one."""
    ensure_key_dir(lay)
    with guarded(lay.lock_path):
        nofollow.drop_link(lay.lock_path)
        fd = nofollow.open_fd(lay.lock_path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another preload of %s holds the lock; waiting for it", lay.key)
            fcntl.flock(fd, fcntl.LOCK_EX)
        with guarded(lay.key_dir):
            sweep_leftovers(lay)
        yield
    finally:
        os.close(fd)  # closing releases the flock; the lock file stays, so no unlink race


def sweep_leftovers(lay: Layout) -> None:
    """Remove `.old-<pid>` and `.deleting-<pid>` left by a killed publish or delete (lock held)."""
    for name in os.listdir(lay.key_dir):
        for prefix in (".old-", ".deleting-"):
            if name.startswith(prefix) and name[len(prefix) :].isdigit():
                log.info("removing %s, left by an interrupted run", name)
                _remove(os.path.join(lay.key_dir, name))


# --- the published cache --------------------------------------------------------------------------------------------


def read_manifest(lay: Layout) -> CacheManifest | None:
    """The manifest if the published directory is complete, else None (see `read_published`)."""
    found = read_published(lay)
    return found[0] if found is not None else None


def read_published(lay: Layout) -> tuple[CacheManifest, str] | None:
    """The manifest and the sha256 of its bytes if the published directory is complete, else None. Stats files, reads
    no data. The digest names exactly the content this manifest describes (a proof is about that content).

    A manifest that is not JSON, or JSON of the wrong shape, or that lists a missing or resized file, makes the
    cache incomplete: it is downloaded again."""
    if not (nofollow.is_real_dir(lay.key_dir) and nofollow.is_real_dir(lay.final)):
        return None  # a symlink in place of the cache is never a cache
    try:
        with os.fdopen(nofollow.open_fd(lay.manifest_path, os.O_RDONLY), "rb") as f:
            data = f.read()
        raw = json.loads(data)
    except (OSError, ValueError, RecursionError, PreloadError):
        return None  # RecursionError: JSON nested past the parser's depth is a corrupt manifest too
    manifest = cachemanifests.parse(raw)
    if manifest is None or manifest.key != lay.key:
        return None
    try:
        for entry in manifest.files:
            if nofollow.regular_size(lay.final, safe_relpath(entry.path)) != entry.size:
                return None
    except PreloadError:
        return None
    return manifest, hashlib.sha256(data).hexdigest()


def manifest_files(manifest: CacheManifest) -> list[dict[str, Any]]:
    """The manifest's file entries as plain dicts (path, size and fingerprint), as `build_manifest` takes them."""
    return [f.model_dump() for f in manifest.files]


def build_manifest(
    lay: Layout,
    source: dict[str, Any],
    files: list[dict[str, Any]],
    extra: dict[str, Any],
    producer: Identity | None = None,
) -> dict[str, Any]:
    manifest = {
        "formatVersion": MANIFEST_FORMAT,
        "key": lay.key,
        "source": source,
        "completedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "totalBytes": sum(f["size"] for f in files),
        "files": sorted(files, key=lambda f: str(f["path"])),
        **extra,
    }
    if producer is not None:
        manifest["producer"] = producer.to_json()
    return manifest


# --- staging --------------------------------------------------------------------------------------------------------


class Staging:
    """The staging directory of one key: a journal of verified files, and the publish step."""

    def __init__(self, lay: Layout) -> None:
        self.lay = lay
        self.dir = lay.staging
        ensure_key_dir(lay)
        with guarded(self.dir):
            nofollow.real_dir(self.dir, replace_link=True)  # a planted .staging link is dropped, never followed
        self._journal: dict[str, dict[str, Any]] = self._read_journal()

    def _read_journal(self) -> dict[str, dict[str, Any]]:
        entries: dict[str, dict[str, Any]] = {}
        try:
            with os.fdopen(nofollow.open_fd(os.path.join(self.dir, JOURNAL_NAME), os.O_RDONLY), encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        entries[entry["path"]] = entry
                    except (ValueError, KeyError, TypeError, RecursionError):
                        continue  # a line torn by a kill: that file is simply fetched again
        except (FileNotFoundError, PreloadError):
            pass  # no journal, or a symlink in its place: nothing to resume
        return entries

    def path(self, rel: str) -> str:
        return os.path.join(self.dir, safe_relpath(rel))

    def part_path(self, rel: str) -> str:
        return self.path(rel) + PART_SUFFIX

    def tmp_dir(self, name: str) -> str:
        path = os.path.join(self.dir, TMP_DIR_NAME, name)
        nofollow.makedirs_inside(self.dir, path)
        return path

    def make_parent(self, rel: str) -> None:
        """Create the directories of `rel` inside staging, as real directories (links there are replaced)."""
        with guarded(self.dir):
            nofollow.makedirs_inside(self.dir, os.path.dirname(self.part_path(rel)))

    def journaled(self, rel: str, fingerprint: dict[str, Any]) -> bool:
        """Whether `rel` was verified in an earlier run for the same remote version and is still on disk whole."""
        entry = self._journal.get(rel)
        if entry is None or entry.get("fingerprint") != fingerprint:
            return False
        return bool(nofollow.regular_size(self.dir, safe_relpath(rel)) == fingerprint["size"])

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
        journal = os.path.join(self.dir, JOURNAL_NAME)
        nofollow.drop_link(journal)
        with os.fdopen(nofollow.open_fd(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as f:
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
            for name in [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                os.unlink(os.path.join(dirpath, name))  # a link to a directory: removed, never walked
                dirnames.remove(name)
            for name in filenames:
                rel = name if rel_dir == "." else os.path.join(rel_dir, name).replace(os.sep, "/")
                if rel in (JOURNAL_NAME, MANIFEST_NAME) or rel in keep:
                    continue
                os.unlink(os.path.join(dirpath, name))

    def publish(self, manifest: dict[str, Any]) -> str:
        """Write the manifest last, fsync everything, and rename the staging directory into place; the manifest's
        sha256 names the content published."""
        tmp = os.path.join(self.dir, TMP_DIR_NAME)
        nofollow.drop_link(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir, JOURNAL_NAME))
        manifest_tmp = os.path.join(self.dir, MANIFEST_NAME + ".tmp")
        data = json.dumps(manifest, indent=1).encode()
        with os.fdopen(nofollow.open_write(manifest_tmp), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(manifest_tmp, os.path.join(self.dir, MANIFEST_NAME))
        for dirpath, _, _ in os.walk(self.dir):
            fsync_path(dirpath)
        old = None
        if os.path.lexists(self.lay.final):
            old = os.path.join(self.lay.key_dir, f".old-{os.getpid()}")
            _clear(old)
            os.replace(self.lay.final, old)
        os.replace(self.dir, self.lay.final)
        fsync_path(self.lay.key_dir)
        if old is not None:
            _remove(old)
        return hashlib.sha256(data).hexdigest()


def fsync_path(path: str) -> None:
    fd = nofollow.open_fd(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the proof result for the CSI driver ----------------------------------------------------------------------------


def leave_proof(lay: Layout, pod_uid: str, outcome: str, reason: str, manifest_sha256: str) -> None:
    """Write this pod's proof result to `<key>/.results/<pod uid>.json`, where the CSI driver reads it when the pod's
    volume goes: the driver, never a pod, then records the pod's namespace as a reader of that content (or not)."""
    if not _POD_UID.match(pod_uid):
        raise PreloadError(Reason.INVALID_SOURCE, f"{pod_uid!r} is not a pod uid")
    with guarded(lay.results_dir):
        nofollow.makedirs_inside(lay.key_dir, lay.results_dir, replace_link=True)
        path = os.path.join(lay.results_dir, f"{pod_uid}.json")
        nofollow.drop_link(path)
        record = {"outcome": outcome, "reason": reason, "manifestSha256": manifest_sha256}
        with os.fdopen(nofollow.open_write(path), "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())


# --- delete ---------------------------------------------------------------------------------------------------------


def delete(root: str, key: str) -> bool:
    """Remove the cache and staging of `key` under `root`, never anything outside; True if something was removed."""
    lay = layout(root, key)  # a validated key has no '/' or '..', so the paths below are lexically inside root
    if not os.path.lexists(os.path.join(lay.root, CACHE_DIR_NAME)):
        return False
    ensure_key_dir(lay)  # a symlink on the way to the key's tree is refused
    tree, real_root = os.path.realpath(lay.key_dir), os.path.realpath(lay.root)
    if os.path.commonpath([tree, real_root]) != real_root:
        raise PreloadError(
            Reason.PATH_ESCAPE, f"refusing to delete under {lay.key_dir}: it resolves outside {lay.root}"
        )
    removed = False
    with locked(lay), guarded(lay.key_dir):
        for path in (lay.final, lay.staging):
            if not os.path.lexists(path):
                continue
            doomed = os.path.join(lay.key_dir, f".deleting-{os.getpid()}")
            _clear(doomed)
            os.replace(path, doomed)  # the cache disappears atomically; the bytes go after
            _remove(doomed)
            removed = True
        fsync_path(lay.key_dir)
    return removed


def _clear(path: str) -> None:
    """Make room for a rename to `path`: whatever is there (a leftover, or a planted link) goes, links unfollowed."""
    if os.path.lexists(path):
        _remove(path)


def _remove(path: str) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)  # a symlink is removed, never followed
        return
    shutil.rmtree(path)


def is_enospc(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full(what: str, error: OSError) -> PreloadError:
    """The retryable DiskFull failure of a write that hit ENOSPC/EDQUOT."""
    return PreloadError(
        Reason.DISK_FULL,
        f"{what}: the disk filled up during the download ({error.strerror}); the partial download was removed, "
        "retrying when space is free",
    )


def discard_staging(lay: Layout) -> None:
    """Remove the staging directory of `lay` (links unfollowed): after a disk-full failure nothing partial is kept."""
    if os.path.lexists(lay.staging):
        _remove(lay.staging)
