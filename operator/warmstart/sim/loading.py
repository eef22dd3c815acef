"""Reading a model directory at start-up, as a real inference server loads its weights before it serves.

The simulator has no weights to use, but on a real node it must prove that the cache the operator prepared is
really there and readable: it reads every byte of every file. When the directory carries the preload's manifest
(``.warmstart-manifest.json``), every file it lists must exist with its recorded size, so a half-published or
tampered cache fails the start instead of serving.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import stat
import time

MANIFEST_NAME = ".warmstart-manifest.json"
_CHUNK = 8 * 1024 * 1024


class WeightsError(RuntimeError):
    """The model directory is missing, incomplete or unreadable; the message says which file and why."""


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What loading read: files, bytes and wall seconds, and whether a manifest vouched for the file list."""

    files: int
    bytes: int
    seconds: float
    manifest: bool


def expected_files(directory: pathlib.Path) -> dict[str, int] | None:
    """The manifest's ``{relative path: size}``, or None when the directory has no manifest."""
    path = directory / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise WeightsError(f"{MANIFEST_NAME} is unreadable: {exc}") from exc
    try:
        return {str(entry["path"]): int(entry["size"]) for entry in document["files"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise WeightsError(f"{MANIFEST_NAME} has no valid file list: {exc!r}") from exc


def present_files(directory: pathlib.Path) -> dict[str, int]:
    """Every regular file under ``directory`` (symlinks not followed), by relative path, with its size."""
    found: dict[str, int] = {}
    for root, dirs, names in os.walk(directory, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            full = pathlib.Path(root, name)
            info = full.lstat()
            if stat.S_ISREG(info.st_mode) and name != MANIFEST_NAME:
                found[str(full.relative_to(directory))] = info.st_size
    return found


def load(directory: pathlib.Path) -> LoadReport:
    """Read every weight file fully; raise :class:`WeightsError` if the directory is not a complete model."""
    started = time.monotonic()
    if not directory.is_dir():
        raise WeightsError(f"model directory {directory} does not exist")
    expected = expected_files(directory)
    present = present_files(directory)
    wanted = expected if expected is not None else present
    if not wanted:
        raise WeightsError(f"model directory {directory} holds no files")
    total = 0
    for relative, size in sorted(wanted.items()):
        if present.get(relative) != size:
            have = "missing" if relative not in present else f"{present[relative]} bytes"
            raise WeightsError(f"{relative}: expected {size} bytes, found {have}")
        total += _read_fully(directory / relative)
    return LoadReport(files=len(wanted), bytes=total, seconds=time.monotonic() - started, manifest=expected is not None)


def _read_fully(path: pathlib.Path) -> int:
    read = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        while chunk := os.read(fd, _CHUNK):
            read += len(chunk)
    finally:
        os.close(fd)
    return read
