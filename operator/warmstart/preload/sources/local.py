"""A model on a mounted file system (FSx for Lustre, a PVC): walk the tree safely and copy it in parallel.

The Job mounts the volume at `mount_root`; the model is `<mount_root>/<modelLocation>`. Symlinks are
followed only when they resolve inside the mount (a cycle is walked once); one that points outside is
refused with PathEscape. Each file is opened with O_NOFOLLOW and the opened file (fstat) must be the one listed
(device, inode, ctime, size, mtime), so a link or another file swapped in after the listing is refused, never
copied.
Large files are copied in `part_size` ranges by several workers with
copy_file_range(2) (pread/pwrite where the kernel refuses), so one big shard uses every worker.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Any

from warmstart.api.cachemanifests import ManifestFile
from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import nofollow, sources, store, verifying
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Listing, OnBytes, Options, RemoteFile, model_location


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class LocalSource:
    """A directory (or one file) under a mount point."""

    def __init__(self, kind: str, mount_root: str, location: str, options: Options, details: dict[str, Any]) -> None:
        self.kind, self.mount_root, self.location, self.options, self.details = (
            kind,
            mount_root,
            location,
            options,
            details,
        )
        self.base = os.path.join(mount_root, location) if location else mount_root

    @classmethod
    def from_config(
        cls, kind: str, config: ModelSourceConfig, options: Options, details: dict[str, Any]
    ) -> LocalSource:
        return cls(kind, options.mount_root, model_location(config), options, details)

    def describe(self) -> dict[str, Any]:
        return {"type": self.kind, "location": self.location, **self.details}

    def _resolve(self, path: str, mount: str) -> str:
        real = os.path.realpath(path)
        if not _inside(real, mount):
            shown = os.path.relpath(path, self.mount_root)
            raise PreloadError(
                Reason.PATH_ESCAPE, f"{self.kind}: {shown} resolves outside the mounted volume; refusing it"
            )
        return real

    def listing(self) -> Listing:
        mount = os.path.realpath(self.mount_root)
        if not os.path.isdir(mount):
            raise PreloadError(Reason.NOT_FOUND, f"{self.kind}: nothing is mounted at {self.mount_root}")
        if not os.path.lexists(self.base):
            raise PreloadError(Reason.NOT_FOUND, f"{self.kind}: {self.location or '/'} does not exist on the volume")
        base = self._resolve(self.base, mount)
        if os.path.isfile(base):
            name = store.safe_relpath(os.path.basename(self.base))
            return Listing(files=(_listed(name, base),))
        files: list[RemoteFile] = []
        seen: set[str] = set()
        stack = [(base, "")]
        while stack:
            real_dir, rel_dir = stack.pop()
            if real_dir in seen:
                continue
            seen.add(real_dir)
            with os.scandir(real_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                rel = f"{rel_dir}{entry.name}"
                real = self._resolve(entry.path, mount) if entry.is_symlink() else entry.path
                if os.path.isdir(real):
                    stack.append((real, rel + "/"))
                elif os.path.isfile(real):
                    files.append(_listed(store.safe_relpath(rel), real))
        if not files:
            raise PreloadError(Reason.NOT_FOUND, f"{self.kind}: {self.location or '/'} holds no files")
        return Listing(files=tuple(files))

    def fetch(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_done: Callable[[RemoteFile], None],
        scratch: str,
        on_kept: OnBytes | None = None,  # a partial file is started over: nothing is kept
    ) -> None:
        part = max(self.options.part_size, 1 << 20)
        remaining: dict[str, int] = {}
        lock = threading.Lock()
        tasks: list[tuple[RemoteFile, int, int]] = []
        for file in sorted(files, key=lambda f: -f.size):
            with os.fdopen(nofollow.open_write(part_path(file)), "wb") as f:
                f.truncate(file.size)
            ranges = [(off, min(part, file.size - off)) for off in range(0, file.size, part)] or [(0, 0)]
            remaining[file.path] = len(ranges)
            tasks += [(file, off, length) for off, length in ranges]

        def copy(file: RemoteFile, offset: int, length: int) -> None:
            try:
                _copy_range(file, self.kind, part_path(file), offset, length, on_bytes)
            except OSError as exc:
                if store.is_enospc(exc):
                    raise store.disk_full(f"{self.kind}: {file.path}", exc) from exc
                raise PreloadError(Reason.NETWORK_ERROR, f"{self.kind}: reading {file.path}: {exc}") from exc
            with lock:
                remaining[file.path] -= 1
                last = remaining[file.path] == 0
            if last:
                on_done(file)

        with concurrent.futures.ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="copy") as pool:
            futures = [pool.submit(copy, *t) for t in tasks]
            concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            pool.shutdown(cancel_futures=True)  # one failure fails the preload: ranges not started are skipped
            failures = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
        if failures:
            first = failures[0]
            raise first if isinstance(first, PreloadError) else PreloadError(Reason.INTERNAL_ERROR, str(first))

    def verifier(self, file: RemoteFile) -> Callable[[str], None]:
        def verify(path: str) -> None:
            verifying.check_size(path, file.size, f"{self.kind}: {file.path}")
            os.close(open_listed(file, self.kind))  # still the very file listed, unchanged, after the copy

        return verify

    def authorize(self, files: Sequence[ManifestFile]) -> list[str]:
        """The volume is mounted in this pod (the kubelet mounted it for this namespace): stat every cached file on it;
        the paths whose size or mtime differ from the manifest's, or that are gone."""
        mount = os.path.realpath(self.mount_root)
        if not os.path.isdir(mount) or not files:
            raise PreloadError(Reason.NOT_FOUND, f"{self.kind}: nothing is mounted at {self.mount_root}")
        base = self._resolve(self.base, mount) if os.path.lexists(self.base) else self.base
        single = os.path.isfile(base)
        differing: list[str] = []
        for file in files:
            expected = sources.recorded(file)
            try:
                st = os.stat(self._resolve(base if single else os.path.join(base, file.path), mount))
            except OSError:
                differing.append(file.path)
                continue
            if st.st_size != expected["size"] or st.st_mtime_ns != expected.get("mtime_ns"):
                differing.append(file.path)
        return differing


def _listed(rel: str, real: str) -> RemoteFile:
    st = os.stat(real)
    return RemoteFile(rel, st.st_size, real, mtime_ns=st.st_mtime_ns, inode=(st.st_dev, st.st_ino, st.st_ctime_ns))


def open_listed(file: RemoteFile, kind: str) -> int:
    """The listed file opened for reading: O_NOFOLLOW, and fstat must show the very file the listing saw."""
    try:
        fd = os.open(file.ref, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PreloadError(
                Reason.PATH_ESCAPE, f"{kind}: {file.path} was replaced by a link after the listing; refusing it"
            ) from exc
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (
        file.inode is not None and (st.st_dev, st.st_ino, st.st_ctime_ns) != file.inode
    ):
        os.close(fd)
        raise PreloadError(
            Reason.PATH_ESCAPE, f"{kind}: {file.path} is not the file listed (replaced after the listing); refusing it"
        )
    if st.st_size != file.size or st.st_mtime_ns != file.mtime_ns:
        os.close(fd)
        raise PreloadError(Reason.NETWORK_ERROR, f"{kind}: {file.path} changed during the copy; retry")
    return fd


def _copy_range(file: RemoteFile, kind: str, dst: str, offset: int, length: int, on_bytes: OnBytes) -> None:
    src = file.ref
    with (
        os.fdopen(open_listed(file, kind), "rb", buffering=0) as fin,
        os.fdopen(nofollow.open_fd(dst, os.O_RDWR), "r+b", buffering=0) as fout,
    ):
        done = 0
        try:
            while done < length:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), length - done, offset + done, offset + done)
                if n == 0:
                    raise OSError(errno.EIO, f"{src} is shorter than listed")
                done += n
                on_bytes(n)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                raise
            while done < length:  # the kernel cannot copy between these files: read and write
                chunk = os.pread(fin.fileno(), min(8 << 20, length - done), offset + done)
                if not chunk:
                    raise OSError(errno.EIO, f"{src} is shorter than listed") from exc
                os.pwrite(fout.fileno(), chunk, offset + done)
                done += len(chunk)
                on_bytes(len(chunk))
