"""S3's additional checksums (SHA256, SHA1, CRC64NVME, CRC32C, CRC32): read them from a HEAD and check a file.

An object has a full-object checksum, or (multipart uploads) a composite one: the checksum of the parts'
checksums, shown with "-N". SHA256, SHA1 and CRC32 come from hashlib and zlib; CRC32C and CRC64NVME from
awscrt (what botocore uses) where it is installed. An algorithm this host cannot compute is not checked: the
caller falls back (see `sources/s3verify.py`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import importlib
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from warmstart.api.preloading import Reason
from warmstart.preload import verifying
from warmstart.preload.results import PreloadError

#: Cheapest to compute first: the first one an object has and this host can compute is the one checked. Each of
#: them catches a damaged or truncated download; none protects against the store itself (it gives the value).
ALGORITHMS = ("CRC64NVME", "CRC32C", "CRC32", "SHA1", "SHA256")
FULL_OBJECT, COMPOSITE = "FULL_OBJECT", "COMPOSITE"


class _Crc:
    """A CRC as a hasher: `fn(data, previous)` continues it; the digest is big-endian, as S3 encodes it."""

    def __init__(self, fn: Callable[[Any, int], int], width: int) -> None:
        self.fn, self.width, self.value = fn, width, 0

    def update(self, data: bytes | memoryview, /) -> None:
        self.value = self.fn(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(self.width, "big")


def _crt(name: str) -> Callable[[Any, int], int] | None:
    try:
        module = importlib.import_module("awscrt.checksums")
    except ImportError:
        return None
    fn: Callable[[Any, int], int] | None = getattr(module, name, None)
    return fn


def hasher_factory(algorithm: str) -> Callable[[], verifying.Hasher] | None:
    """A constructor of running checksums for an S3 algorithm name; None if this host cannot compute it."""
    if algorithm == "SHA256":
        return hashlib.sha256
    if algorithm == "SHA1":
        return lambda: hashlib.sha1(usedforsecurity=False)
    # CRC32 from zlib: 1.7x the speed of awscrt's on the x86 test host (measured; neither uses a CRC32 instruction)
    if algorithm == "CRC32":
        return lambda: _Crc(zlib.crc32, 4)
    crc = {"CRC32C": ("crc32c", 4), "CRC64NVME": ("crc64nvme", 8)}.get(algorithm)
    fn = _crt(crc[0]) if crc else None
    if crc is None or fn is None:
        return None
    width = crc[1]
    return lambda: _Crc(fn, width)


@dataclasses.dataclass(frozen=True)
class Expected:
    """One checksum S3 gave for an object."""

    algorithm: str
    value: str  # base64, without the "-N" of a composite
    parts: int | None  # the N of a composite checksum ("-N", else the ETag's), None if not known
    kind: str | None  # FULL_OBJECT, COMPOSITE, or None when the store does not say

    def describe(self) -> str:
        kind = {FULL_OBJECT: "full-object ", COMPOSITE: "composite "}.get(self.kind or "", "")
        return f"{kind}{self.algorithm} {self.value}" + (f"-{self.parts}" if self.kind == COMPOSITE else "")


def decode(value: str) -> bytes | None:
    """A base64 checksum value as bytes; None if it is not base64."""
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        return None


def from_head(head: Mapping[str, Any], etag_parts: int | None) -> list[Expected]:
    """The checksums of a `HeadObject(ChecksumMode=ENABLED)` answer, cheapest first."""
    kind = head.get("ChecksumType")
    out: list[Expected] = []
    for algorithm in ALGORITHMS:
        raw = head.get(f"Checksum{algorithm}")
        if not raw:
            continue
        value, _, suffix = str(raw).partition("-")
        parts = int(suffix) if suffix.isdigit() else etag_parts
        out.append(Expected(algorithm, value, parts, COMPOSITE if suffix.isdigit() else kind))
    return out


def computable(expected: list[Expected]) -> tuple[Expected | None, list[str]]:
    """The first checksum this host can compute, and the algorithms it cannot."""
    missing = [e.algorithm for e in expected if hasher_factory(e.algorithm) is None]
    usable = [e for e in expected if hasher_factory(e.algorithm) is not None]
    return (usable[0] if usable else None), missing


def check(path: str, size: int, expected: Expected, name: str, part_size_hint: int | None = None) -> None:
    """Raise ChecksumMismatch unless the file gives `expected` (full-object, or composite over its parts).

    When the store does not say which kind it is, both are tried in the same pass (moto gives composite
    multipart checksums without the "-N")."""
    new = hasher_factory(expected.algorithm)
    if new is None:
        raise ValueError(f"cannot compute {expected.algorithm}")
    want = decode(expected.value)
    if want is None:
        raise PreloadError(
            Reason.CHECKSUM_MISMATCH, f"{name}: the store's {expected.algorithm} {expected.value!r} is not base64"
        )
    full = new() if expected.kind in (FULL_OBJECT, None) else None
    candidates = []
    if expected.kind in (COMPOSITE, None) and expected.parts:
        candidates = verifying.part_size_candidates(size, expected.parts, part_size_hint)
    # The store's part-size hint is nearly always right: one pass with it alone, then the other candidates.
    passes = [candidates[:1], candidates[1:]] if part_size_hint and candidates[:1] == [part_size_hint] else [candidates]
    for index, sizes in enumerate(passes):
        if index and not sizes:
            break
        hashers = [verifying.PartHasher(p, new) for p in sizes]
        whole = full if index == 0 else None
        for chunk in verifying.read_chunks(path):
            if whole is not None:
                whole.update(chunk)
            for hasher in hashers:
                hasher.feed(chunk)
        if index == 0 and full is not None and full.digest() == want:
            return
        if any(h.composite() == (want, expected.parts) for h in hashers):
            return
    raise PreloadError(Reason.CHECKSUM_MISMATCH, f"{name}: content does not match the store's {expected.describe()}")
