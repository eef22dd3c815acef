"""Checking one downloaded S3 object: size, then S3's additional checksum, else the MD5 ETag, else size alone.

The listing says which additional checksums an object has (ChecksumAlgorithm) but not their values, nor the
encryption: those need one `HEAD ?ChecksumMode=ENABLED`, made only when it can help: the listing names a
checksum, the ETag is not MD5-shaped, or the MD5 check failed (an SSE-KMS or SSE-C ETag is 32 hex digits that
are not the content's MD5: only the HEAD tells it apart from corruption).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from warmstart.preload import s3checksums, verifying
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import RemoteFile

log = logging.getLogger(__name__)

MD5_ETAG = re.compile(r"^[0-9a-f]{32}(-[0-9]+)?$")
KMS = ("aws:kms", "aws:kms:dsse")


def md5_shaped(etag: str | None) -> bool:
    """True for an ETag that may be an MD5 (single-part) or an MD5 of MD5s (multipart "-N")."""
    return bool(etag and MD5_ETAG.match(etag.strip('"').lower()))


def etag_parts(etag: str | None) -> int | None:
    """The N of a multipart ETag "...-N", None for a single-part one."""
    tail = (etag or "").rpartition("-")[2] if "-" in (etag or "") else ""
    return int(tail) if tail.isdigit() else None


def encryption(head: Mapping[str, Any]) -> str | None:
    """ "SSE-KMS" or "SSE-C" when the ETag is not the content's MD5 for that reason, else None (SSE-S3 too)."""
    if head.get("SSECustomerAlgorithm"):
        return "SSE-C"
    if head.get("ServerSideEncryption") in KMS:
        return "SSE-KMS"
    return None


def verify(
    path: str,
    file: RemoteFile,
    name: str,
    head: Callable[[], Mapping[str, Any]],
    part_size_hint: Callable[[], int | None],
) -> str:
    """Raise ChecksumMismatch unless the file is this object; return what was checked (for the log).

    `head` is HeadObject with ChecksumMode=ENABLED, `part_size_hint` the size of part 1 (both called at most once,
    only when needed)."""
    verifying.check_size(path, file.size, name)
    parts = etag_parts(file.etag)
    answer: Mapping[str, Any] | None = None
    if file.checksum_algorithms or not md5_shaped(file.etag):
        answer = head()
        checked = _by_checksum(path, file, name, answer, parts, part_size_hint)
        if checked:
            return checked
    if answer is None and file.etag:
        try:
            verifying.s3_etag(path, file.size, file.etag, name, part_size_hint() if parts else None)
            return "size, MD5 ETag"
        except PreloadError as mismatch:
            answer = head()  # an encrypted object's ETag is not its MD5; a checksum the listing did not name
            checked = _by_checksum(path, file, name, answer, parts, part_size_hint)
            if checked:
                return checked
            if encryption(answer) is None:
                raise mismatch
    why = _size_only_reason(file, answer or {}, parts)
    log.warning("%s: checked by size only: %s", name, why)
    return f"size only ({why})"


def _by_checksum(
    path: str,
    file: RemoteFile,
    name: str,
    answer: Mapping[str, Any],
    parts: int | None,
    part_size_hint: Callable[[], int | None],
) -> str | None:
    expected, missing = s3checksums.computable(s3checksums.from_head(answer, parts))
    if missing:
        log.info("%s: cannot compute %s here (awscrt not installed)", name, ", ".join(missing))
    if expected is None:
        return None
    composite = expected.kind != s3checksums.FULL_OBJECT and expected.parts
    s3checksums.check(path, file.size, expected, name, part_size_hint() if composite else None)
    return f"size, {expected.describe()}"


def _size_only_reason(file: RemoteFile, answer: Mapping[str, Any], parts: int | None) -> str:
    sse = encryption(answer)
    algorithms = [e.algorithm for e in s3checksums.from_head(answer, parts)]
    checksum = (
        f"its {', '.join(algorithms)} checksum cannot be computed here (install awscrt)"
        if algorithms
        else "no additional checksum"
    )
    if sse:
        return f"{sse}: the ETag is not an MD5, and {checksum}"
    return f"the ETag {file.etag!r} is not MD5-based, and {checksum}"
