"""Which per-part check one S3 object gets: the part size of its download, the digests of each part, and how they
add up to the object's check without reading the file again.

Cheapest first: a full-object CRC64NVME, CRC32C or CRC32 (per-part CRCs combined in C), a composite checksum or a
multipart MD5 ETag (per-part digests at the upload's part size), the MD5 of a single-part object that fits in one
part. Anything else (a full-object SHA, an MD5 spanning several download parts, an object whose upload part size is
unknown, an ETag that is not MD5-shaped) is checked after it lands by `s3verify`, which reads the file again.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from warmstart.preload import partdigests, partjournal, s3checksums, verifying
from warmstart.preload.sources import RemoteFile, s3verify

#: Checksum algorithms, cheapest to compute first (CRCs in C, then the SHAs).
COST_ORDER = ("CRC64NVME", "CRC32C", "CRC32", "SHA1", "SHA256")


class Finish(str, enum.Enum):
    COMBINE = "combine"  # a full-object CRC from the parts' CRCs
    COMPOSITE = "composite"  # the digest of the parts' digests (a composite checksum, a multipart ETag)
    EITHER = "either"  # a store that does not say full-object or composite (moto): both are tried
    WHOLE = "whole"  # one part: its digest is the object's
    REREAD = "reread"  # nothing per part: s3verify reads the file after it lands


@dataclasses.dataclass(frozen=True)
class Plan:
    part_size: int
    algorithms: tuple[str, ...]  # per part; the first is the one re-checked from disk on resume
    finish: Finish
    algorithm: str | None = None  # the object's check, when it is per part
    expected: bytes = b""  # the value it must give
    parts: int | None = None  # a composite's part count
    label: str = ""  # what was checked, for the log

    def check(self, digests: Sequence[Mapping[str, str]], size: int) -> bool:
        """Whether the parts' digests (in order) give the object's expected check."""
        if self.algorithm is None:
            return False
        mine = [d[self.algorithm] for d in digests]
        if self.finish in (Finish.COMBINE, Finish.EITHER):
            lengths = [partjournal.part_range(i, size, self.part_size)[1] for i in range(len(mine))]
            if partdigests.combine(self.algorithm, list(zip(mine, lengths, strict=True))) == self.expected:
                return True
        if self.finish in (Finish.COMPOSITE, Finish.EITHER):
            return len(mine) == self.parts and partdigests.composite(self.algorithm, mine) == self.expected
        if self.finish == Finish.WHOLE:
            return len(mine) == 1 and bytes.fromhex(mine[0]) == self.expected
        return False


def reread(part_size: int) -> Plan:
    return Plan(part_size, (partdigests.local_algorithm(),), Finish.REREAD)


def _with_local(algorithm: str) -> tuple[str, ...]:
    local = partdigests.local_algorithm()
    return (algorithm,) if algorithm == local else (local, algorithm)


def needs_head(file: RemoteFile, part_size: int) -> bool:
    """Whether choosing needs the HEAD (checksum values, encryption, upload part size): not for a plain small object."""
    return bool(file.checksum_algorithms) or not s3verify.md5_shaped(file.etag) or file.size > part_size


def choose(
    file: RemoteFile, part_size: int, head: Mapping[str, Any] | None, part_size_hint: Callable[[], int | None]
) -> Plan:
    """The plan for `file`; `head` is its HeadObject(ChecksumMode=ENABLED), None when `needs_head` said no."""
    etag_parts = s3verify.etag_parts(file.etag)
    expected = s3checksums.from_head(head or {}, etag_parts)
    by_cost = sorted(
        (e for e in expected if partdigests.hasher(e.algorithm) is not None),
        key=lambda e: COST_ORDER.index(e.algorithm) if e.algorithm in COST_ORDER else len(COST_ORDER),
    )
    for e in by_cost:
        value = s3checksums.decode(e.value)
        if value is None:
            return reread(part_size)  # s3verify reports the malformed value
        full = e.kind == s3checksums.FULL_OBJECT or (e.kind is None and etag_parts is None)
        if full and (file.size <= part_size or partdigests.combinable(e.algorithm)):
            finish = Finish.WHOLE if file.size <= part_size else Finish.COMBINE
            return Plan(part_size, _with_local(e.algorithm), finish, e.algorithm, value, None, e.describe())
        if e.kind in (s3checksums.COMPOSITE, None) and e.parts:
            upload = _upload_part_size(file.size, e.parts, part_size_hint)
            if upload and e.kind is None and partdigests.combinable(e.algorithm):
                return Plan(upload, _with_local(e.algorithm), Finish.EITHER, e.algorithm, value, e.parts, e.describe())
            if upload and e.kind == s3checksums.COMPOSITE:
                return Plan(
                    upload, _with_local(e.algorithm), Finish.COMPOSITE, e.algorithm, value, e.parts, e.describe()
                )
    if by_cost or (head is not None and s3verify.encryption(head)) or not s3verify.md5_shaped(file.etag):
        return reread(part_size)
    etag = (file.etag or "").lower()
    if etag_parts is None:
        if file.size <= part_size:
            return Plan(
                part_size,
                _with_local(partdigests.MD5),
                Finish.WHOLE,
                partdigests.MD5,
                bytes.fromhex(etag),
                None,
                "MD5 ETag",
            )
        return reread(part_size)
    upload = _upload_part_size(file.size, etag_parts, part_size_hint)
    if upload is None:
        return reread(part_size)
    digest = bytes.fromhex(etag.split("-")[0])
    return Plan(
        upload,
        _with_local(partdigests.MD5),
        Finish.COMPOSITE,
        partdigests.MD5,
        digest,
        etag_parts,
        "multipart MD5 ETag",
    )


def _upload_part_size(size: int, parts: int, hint: Callable[[], int | None]) -> int | None:
    """The part size the object was uploaded with, if the store says and it fits the part count."""
    if parts == 1:
        return None  # one part: composite of one digest; rare enough to read again
    value = hint()
    if value and value in verifying.part_size_candidates(size, parts, value)[:1]:
        return value
    return None
