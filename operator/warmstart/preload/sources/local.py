"""A model on a mounted file system (FSx for Lustre, a PVC): walk the tree safely and copy it in parallel.

The Job mounts the volume at `mount_root`; the model is `<mount_root>/<modelLocation>`. Symlinks are
followed only when they resolve inside the mount (a cycle is walked once); one that points outside is
refused with PathEscape. Large files are copied in `part_size` ranges by several workers with
copy_file_range(2) (pread/pwrite where the kernel refuses), so one big shard uses every worker.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import nofollow, store, verifying
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
            st = os.stat(base)
            name = store.safe_relpath(os.path.basename(self.base))
            return Listing(files=(RemoteFile(name, st.st_size, base, mtime_ns=st.st_mtime_ns),))
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
                    st = os.stat(real)
                    files.append(RemoteFile(store.safe_relpath(rel), st.st_size, real, mtime_ns=st.st_mtime_ns))
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
                _copy_range(file.ref, part_path(file), offset, length, on_bytes)
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
            st = os.stat(file.ref)
            if st.st_size != file.size or st.st_mtime_ns != file.mtime_ns:
                raise PreloadError(Reason.NETWORK_ERROR, f"{self.kind}: {file.path} changed during the copy; retry")

        return verify

    def authorize(self, paths: Sequence[str]) -> None:
        """The volume is mounted in this pod (the kubelet mounted it for this namespace): stat one cached file."""
        mount = os.path.realpath(self.mount_root)
        if not os.path.isdir(mount) or not paths:
            raise PreloadError(Reason.NOT_FOUND, f"{self.kind}: nothing is mounted at {self.mount_root}")
        base = self._resolve(self.base, mount) if os.path.lexists(self.base) else self.base
        candidate = base if os.path.isfile(base) else os.path.join(base, paths[0])
        try:
            os.stat(self._resolve(candidate, mount))
        except OSError as exc:
            raise PreloadError(
                Reason.NOT_FOUND, f"{self.kind}: {paths[0]} is not readable on this pod's volume: {exc.strerror}"
            ) from exc


def _copy_range(src: str, dst: str, offset: int, length: int, on_bytes: OnBytes) -> None:
    with open(src, "rb", buffering=0) as fin, os.fdopen(nofollow.open_fd(dst, os.O_RDWR), "r+b", buffering=0) as fout:
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
