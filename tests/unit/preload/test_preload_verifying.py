"""Checksums: S3 single-part and multipart ETags (part size derived), sha256 and git blob ids."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from warmstart.api.preloading import Reason
from warmstart.preload import verifying
from warmstart.preload.results import PreloadError

MIB = 1 << 20


def multipart_etag(data: bytes, part: int) -> str:
    digests = [hashlib.md5(data[i : i + part]).digest() for i in range(0, len(data), part)]
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


@pytest.mark.parametrize("part", [5 * MIB, 8 * MIB, 16 * MIB, 5 * MIB + 17])
def test_multipart_etag_is_recomputed_with_the_upload_part_size(tmp_path: Path, part: int) -> None:
    data = os.urandom(33 * MIB + 3)
    path = tmp_path / "f"
    path.write_bytes(data)
    etag = multipart_etag(data, part)
    verifying.s3_etag(str(path), len(data), etag, "f", part_size_hint=part if part % MIB else None)
    with pytest.raises(PreloadError) as info:
        verifying.s3_etag(str(path), len(data), etag.replace(etag[0], "0" if etag[0] != "0" else "1", 1), "f")
    assert info.value.reason == Reason.CHECKSUM_MISMATCH


def test_single_part_etag(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    verifying.s3_etag(str(path), 5, '"5d41402abc4b2a76b9719d911017c592"', "f")
    with pytest.raises(PreloadError, match="does not match the ETag"):
        verifying.s3_etag(str(path), 5, "0" * 32, "f")


def test_part_size_candidates() -> None:
    size = 450 * MIB
    assert verifying.part_size_candidates(size, 57)[0] == 8 * MIB  # the smallest whole MiB that gives 57 parts
    assert 16 * MIB in verifying.part_size_candidates(size, 29)
    assert all(-(-size // p) == 57 for p in verifying.part_size_candidates(size, 57))
    assert verifying.part_size_candidates(size, 57, hint=size // 57 + 1)[0] == size // 57 + 1
    assert verifying.part_size_candidates(10, 20) == []


def test_sha256_and_git_blob(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"weights")
    verifying.sha256(str(path), hashlib.sha256(b"weights").hexdigest(), "f")
    verifying.git_blob_sha1(str(path), hashlib.sha1(b"blob 7\0weights").hexdigest(), "f")
    with pytest.raises(PreloadError, match="sha256"):
        verifying.sha256(str(path), "0" * 64, "f")
    with pytest.raises(PreloadError, match="git blob id"):
        verifying.git_blob_sha1(str(path), "0" * 40, "f")
    with pytest.raises(PreloadError, match="size is 7 bytes"):
        verifying.check_size(str(path), 8, "f")
