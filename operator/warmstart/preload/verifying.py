"""Checking downloaded bytes against what the source says: sizes, S3 ETags (multipart too), sha256, git sha1.

A multipart ETag is the MD5 of the parts' MD5s followed by "-N". To recompute it, the part size the object
was uploaded with is needed: it is derived from the size and N (the sizes p with (N-1)*p < size <= N*p,
preferring the ones clients use: whole MiB, 8 MiB doubled) plus the source's hint (S3 HEAD ?partNumber=1),
and all candidates are hashed in a single pass over the file.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
from collections.abc import Callable
from typing import Any, Protocol

from warmstart.api.preloading import Reason
from warmstart.preload.results import PreloadError

MIB = 1 << 20
CHUNK = 8 * MIB
MAX_CANDIDATES = 6
#: Threads hashing the parts of one multipart object.
HASH_THREADS = max(1, min(8, os.cpu_count() or 1))
COMMON_PART_SIZES_MIB = (8, 16, 5, 10, 15, 25, 32, 50, 64, 100, 128, 256, 512, 1024, 2048, 4096)


def check_size(path: str, size: int, name: str) -> None:
    actual = os.stat(path).st_size
    if actual != size:
        raise PreloadError(Reason.CHECKSUM_MISMATCH, f"{name}: size is {actual} bytes, the source says {size}")


def part_size_candidates(size: int, parts: int, hint: int | None = None) -> list[int]:
    """Part sizes that split `size` bytes into exactly `parts` parts, most likely first."""
    if parts < 1 or size < parts:
        return []
    lo = -(-size // parts)
    hi = size if parts == 1 else (size - 1) // (parts - 1)
    ordered = [hint] if hint else []
    ordered.append(-(-lo // MIB) * MIB)
    ordered += [m * MIB for m in COMMON_PART_SIZES_MIB]
    ordered += [8 * MIB << k for k in range(12)]
    ordered.append(lo)
    out: list[int] = []
    for c in ordered:
        if c is not None and lo <= c <= hi and c not in out:
            out.append(c)
    return out[:MAX_CANDIDATES]


class Hasher(Protocol):
    """What a running checksum offers: hashlib's objects, and the CRC wrappers of `s3checksums`."""

    def update(self, data: bytes | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...


def _md5() -> Hasher:
    return hashlib.md5(usedforsecurity=False)


class PartHasher:
    """A checksum (MD5 unless told) of each part of one candidate part size, fed the file's bytes in order."""

    def __init__(self, part_size: int, new: Callable[[], Hasher] = _md5) -> None:
        self.part_size = part_size
        self.new = new
        self.current = new()
        self.filled = 0
        self.digests: list[bytes] = []

    def feed(self, view: memoryview) -> None:
        while view:
            take = min(len(view), self.part_size - self.filled)
            self.current.update(view[:take])
            self.filled += take
            view = view[take:]
            if self.filled == self.part_size:
                self.digests.append(self.current.digest())
                self.current, self.filled = self.new(), 0

    def composite(self) -> tuple[bytes, int]:
        """The checksum of the parts' checksums, and the number of parts."""
        digests = self.digests + ([self.current.digest()] if self.filled else [])
        combined = self.new()
        combined.update(b"".join(digests))
        return combined.digest(), len(digests)

    def etag(self) -> str:
        digest, count = self.composite()
        return f"{digest.hex()}-{count}"


def read_chunks(path: str) -> Any:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            yield view[:n]


def s3_etag(path: str, size: int, etag: str, name: str, part_size_hint: int | None = None) -> None:
    """Raise ChecksumMismatch unless the file's content gives this S3 ETag (single-part or multipart)."""
    etag = etag.strip('"').lower()
    if "-" not in etag:
        digest = hashlib.md5(usedforsecurity=False)
        for chunk in read_chunks(path):
            digest.update(chunk)
        if digest.hexdigest() != etag:
            raise PreloadError(
                Reason.CHECKSUM_MISMATCH, f"{name}: MD5 {digest.hexdigest()} does not match the ETag {etag}"
            )
        return
    try:
        parts = int(etag.rsplit("-", 1)[1])
    except ValueError:
        return  # not an MD5-based ETag (e.g. SSE-KMS or a store of its own): sizes are all we can check
    candidates = part_size_candidates(size, parts, part_size_hint)
    if not candidates:
        raise PreloadError(
            Reason.CHECKSUM_MISMATCH, f"{name}: {size} bytes cannot have the {parts} parts of ETag {etag}"
        )
    # The store's hint is nearly always right: hash with it alone, its parts on several threads; then the others.
    if part_size_hint and candidates[0] == part_size_hint:
        if _parallel_etag(path, size, part_size_hint) == etag:
            return
        candidates = candidates[1:]
    for sizes in filter(None, [candidates]):
        hashers = [PartHasher(p) for p in sizes]
        for chunk in read_chunks(path):
            for hasher in hashers:
                hasher.feed(chunk)
        if any(h.etag() == etag for h in hashers):
            return
    tried = ", ".join(str(p) for p in candidates)
    raise PreloadError(
        Reason.CHECKSUM_MISMATCH,
        f"{name}: content does not match the multipart ETag {etag} (part sizes tried: {tried})",
    )


def _parallel_etag(path: str, size: int, part_size: int) -> str:
    """The multipart ETag for one part size, each part hashed on its own thread (hashlib releases the GIL)."""

    def part_md5(index: int) -> bytes:
        digest = hashlib.md5(usedforsecurity=False)
        offset, end = index * part_size, min(size, (index + 1) * part_size)
        with open(path, "rb", buffering=0) as f:
            while offset < end:
                chunk = os.pread(f.fileno(), min(CHUNK, end - offset), offset)
                if not chunk:
                    break
                digest.update(chunk)
                offset += len(chunk)
        return digest.digest()

    count = -(-size // part_size)
    with concurrent.futures.ThreadPoolExecutor(min(HASH_THREADS, count)) as pool:
        digests = list(pool.map(part_md5, range(count)))
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{count}"


def sha256(path: str, expected: str, name: str) -> None:
    digest = hashlib.sha256()
    for chunk in read_chunks(path):
        digest.update(chunk)
    if digest.hexdigest() != expected.lower():
        raise PreloadError(
            Reason.CHECKSUM_MISMATCH, f"{name}: sha256 {digest.hexdigest()} does not match the Hub's {expected}"
        )


def git_blob_sha1(path: str, expected: str, name: str) -> None:
    digest = hashlib.sha1(f"blob {os.stat(path).st_size}\0".encode(), usedforsecurity=False)
    for chunk in read_chunks(path):
        digest.update(chunk)
    if digest.hexdigest() != expected.lower():
        raise PreloadError(
            Reason.CHECKSUM_MISMATCH, f"{name}: git blob id {digest.hexdigest()} does not match the Hub's {expected}"
        )
