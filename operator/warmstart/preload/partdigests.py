"""Digests of a file's parts: computed as each part arrives or re-read from disk, and combined into an object's check.

A part's digest is hex. CRCs are big-endian, as S3 encodes them, so a composite checksum is the digest of the
concatenated part digests. Full-object CRC32, CRC32C and CRC64NVME combine without reading the data again (awscrt's
`combine_*`, in C); MD5, SHA1 and SHA256 of a whole object do not combine and are computed by reading the file.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

from warmstart.preload import s3checksums, verifying

MD5 = "MD5"
CRC_WIDTH = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8}
READ_CHUNK = 8 << 20


def _crt() -> ModuleType | None:
    try:
        return importlib.import_module("awscrt.checksums")
    except ImportError:
        return None


def hasher(algorithm: str) -> Callable[[], verifying.Hasher] | None:
    """A constructor of running digests (MD5 or an S3 checksum algorithm); None if this host cannot compute it."""
    if algorithm == MD5:
        return lambda: hashlib.md5(usedforsecurity=False)
    return s3checksums.hasher_factory(algorithm)


def local_algorithm() -> str:
    """The cheapest digest this host computes in C, used to re-check parts on disk at a resume."""
    return "CRC64NVME" if hasher("CRC64NVME") is not None else "CRC32"


def combinable(algorithm: str) -> bool:
    """Whether full-object checksums of this algorithm can be combined from part checksums here."""
    crt = _crt()
    return algorithm in CRC_WIDTH and crt is not None and hasattr(crt, f"combine_{algorithm.lower()}")


def combine(algorithm: str, parts: Sequence[tuple[str, int]]) -> bytes:
    """The full-object CRC of consecutive parts given as (hex digest, length)."""
    crt = _crt()
    assert crt is not None
    fn = getattr(crt, f"combine_{algorithm.lower()}")
    value = 0
    for index, (digest, length) in enumerate(parts):
        part = int(digest, 16)
        value = part if index == 0 else fn(value, part, length)
    return int(value).to_bytes(CRC_WIDTH[algorithm], "big")


def composite(algorithm: str, digests: Sequence[str]) -> bytes:
    """The digest of the concatenated part digests: a composite S3 checksum, or the MD5 of a multipart ETag."""
    new = hasher(algorithm)
    assert new is not None
    h = new()
    h.update(b"".join(bytes.fromhex(d) for d in digests))
    return h.digest()


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


_buffers = threading.local()


def _buffer() -> memoryview:
    """This thread's read buffer (one allocation per thread: a re-check reads hundreds of parts)."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(READ_CHUNK))
    return view


def of_range(fd: int, offset: int, length: int, algorithm: str) -> str:
    """The hex digest of `length` bytes at `offset` of the open file `fd`, read in chunks (short file: no match)."""
    new = hasher(algorithm)
    assert new is not None
    h = new()
    view = _buffer()
    done = 0
    while done < length:
        n = os.preadv(fd, [view[: min(len(view), length - done)]], offset + done)
        if n <= 0:
            return ""
        h.update(view[:n])
        done += n
    return h.digest().hex()
