"""Model sources: list a source's files (sizes, checksums) and fetch them into the staging directory.

Each source module (s3, hf, fsx, volume) provides a class with the `Source` shape below. `open_source`
picks one from a validated ModelSourceConfig; `list_source` is the size estimate used by the capacity
pre-check before any byte is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from warmstart.api import preloading
from warmstart.api.cachemanifests import ManifestFile
from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig, ModelSourceType
from warmstart.preload.results import PreloadError

DEFAULT_CONCURRENCY = 16
DEFAULT_PART_SIZE = 16 << 20


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One file of a model, as the source describes it."""

    path: str  # relative path inside the model, '/'-separated, checked by store.safe_relpath
    size: int
    ref: str  # where the source finds it: an S3 key, a Hub filename, an absolute local path
    etag: str | None = None  # S3 ETag without quotes: md5 hex, or md5-of-md5s "-N" for multipart uploads
    sha256: str | None = None  # Hub LFS oid
    git_sha1: str | None = None  # Hub git blob id of a non-LFS file
    mtime_ns: int | None = None  # local sources: to notice a file changing under the copy
    checksum_algorithms: tuple[str, ...] = ()  # S3: the additional checksums the listing names (values need a HEAD)
    #: local sources: (st_dev, st_ino, st_ctime_ns) at listing; the opened file must be this very one (a reused inode
    #: number has a new ctime, which no one can set)
    inode: tuple[int, int, int] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this version of the file: recorded in the journal and the manifest."""
        body: dict[str, Any] = {"size": self.size}
        for name in ("etag", "sha256", "git_sha1", "mtime_ns"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


def recorded(file: ManifestFile) -> dict[str, Any]:
    """The fingerprint a manifest recorded for a file (what `RemoteFile.fingerprint` gave at download)."""
    return {"size": file.size, **(file.model_extra or {})}


@dataclasses.dataclass(frozen=True)
class Listing:
    """Every file of a model, with the total size the capacity pre-check needs."""

    files: tuple[RemoteFile, ...]
    commit: str | None = None  # Hub: the commit the listing was made at

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclasses.dataclass(frozen=True)
class Options:
    """How to reach and how hard to pull: from the command line and the environment."""

    concurrency: int = DEFAULT_CONCURRENCY
    part_size: int = DEFAULT_PART_SIZE
    mount_root: str = preloading.SOURCE_MOUNT
    hf_token_file: str | None = None
    processes: int = 1  # S3: download processes, each with `concurrency / processes` requests
    env: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))


#: Called from download threads with the number of bytes just written.
OnBytes = Callable[[int], None]


class Source(Protocol):
    def listing(self) -> Listing: ...

    def fetch(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_done: Callable[[RemoteFile], None],
        scratch: str,
        on_kept: OnBytes | None = None,
    ) -> None:
        """Download every file to its part path; call on_done(file) as each one completes (from any thread).

        `scratch` is a directory inside staging that the source may use for its own files. `on_kept` is told the
        bytes of partial files that an interrupted run left and that are kept (S3 only; the others start over)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The source as recorded in the manifest (no secrets)."""
        ...

    def verifier(self, file: RemoteFile) -> Callable[[str], None]:
        """A check of a downloaded file at a path; raises PreloadError(ChecksumMismatch)."""
        ...

    def authorize(self, files: Sequence[ManifestFile]) -> list[str]:
        """Check that this pod may read every cached file, and which of them the source now holds otherwise.

        One HEAD (or stat) per file, with this pod's own credentials and endpoints; its size and fingerprint
        (ETag, Hub LFS sha256 or git blob id, mtime) are compared with the manifest's. Returns the paths that differ
        or are gone. Raises PreloadError (AccessDenied, SecretMissing, NetworkError, ...) when it may not read them."""
        ...


def open_source(config: ModelSourceConfig, options: Options) -> Source:
    kind = config.model_source_type
    if kind == ModelSourceType.S3:
        from warmstart.preload.sources import s3

        return s3.S3Source.from_config(config, options)
    if kind == ModelSourceType.HUGGINGFACE:
        from warmstart.preload.sources import hf

        return hf.HubSource.from_config(config, options)
    if kind == ModelSourceType.FSX:
        from warmstart.preload.sources import fsx

        return fsx.source(config, options)
    if kind == ModelSourceType.KUBERNETES_VOLUME:
        from warmstart.preload.sources import volume

        return volume.source(config, options)
    raise PreloadError(Reason.INVALID_SOURCE, f"unsupported modelSourceType {kind!r}")


def list_source(config: ModelSourceConfig, options: Options | None = None) -> Listing:
    """Every file of the source with sizes: the input of the capacity pre-check. Writes nothing."""
    return open_source(config, options or Options()).listing()


def model_location(config: ModelSourceConfig) -> str:
    """modelLocation, checked: relative, without '..' segments (the CRD checks too; this is the last line)."""
    location = (config.model_location or "").strip()
    if location.startswith("/") or ".." in location.replace("\\", "/").split("/") or "\0" in location:
        raise PreloadError(Reason.PATH_ESCAPE, f"modelLocation {location!r} must be relative and have no '..' segment")
    return location
