"""Only some files of a source: the top-level files a caller names, those the source has (`preload --files`).

A router fetches a model's tokenizer files this way, not its weights. Files the source lacks are left out, so the
subset may be empty; every other call goes to the wrapped source unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from warmstart.api.cachemanifests import ManifestFile
from warmstart.preload.sources import Listing, OnBytes, RemoteFile, Source


class Subset:
    """`source`, listing only the files whose path is one of `names`."""

    def __init__(self, source: Source, names: Sequence[str]) -> None:
        self.source = source
        self.names = frozenset(names)

    def listing(self) -> Listing:
        full = self.source.listing()
        return Listing(tuple(f for f in full.files if f.path in self.names), commit=full.commit)

    def fetch(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_done: Callable[[RemoteFile], None],
        scratch: str,
        on_kept: OnBytes | None = None,
    ) -> None:
        self.source.fetch(files, part_path, on_bytes, on_done, scratch, on_kept)

    def describe(self) -> dict[str, Any]:
        return {**self.source.describe(), "files": sorted(self.names)}

    def verifier(self, file: RemoteFile) -> Callable[[str], None]:
        return self.source.verifier(file)

    def authorize(self, files: Sequence[ManifestFile]) -> list[str]:
        return self.source.authorize(files)


def names_of(raw: str) -> list[str]:
    """`--files a,b`: top-level file names only (no '/', no '..'), each at most once."""
    names = [name.strip() for name in raw.split(",") if name.strip()]
    bad = [name for name in names if "/" in name or name in (".", "..") or "\0" in name]
    if bad or not names:
        raise ValueError(f"--files takes comma-separated top-level file names, not {raw!r}")
    return sorted(set(names))
