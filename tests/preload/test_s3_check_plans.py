"""Which check an S3 object gets, and that the parts' digests add up to S3's own values (awscrt computes them).

The expected values are computed here the way S3 computes them (whole-object CRCs, the MD5 of part MD5s), from the
same bytes the preloader digests part by part."""

from __future__ import annotations

import base64
import hashlib
import os

import awscrt.checksums
import pytest

from warmstart.preload import partdigests, s3checksums
from warmstart.preload.sources import RemoteFile
from warmstart.preload.sources.s3plans import Finish, choose, needs_head

MIB = 1 << 20
DATA = os.urandom(10 * MIB + 12345)
UPLOAD = 4 * MIB
DOWNLOAD = 3 * MIB


def b64(value: int, width: int) -> str:
    return base64.b64encode(value.to_bytes(width, "big")).decode()


def multipart_etag(data: bytes, part: int) -> str:
    md5s = [hashlib.md5(data[i : i + part]).digest() for i in range(0, len(data), part)]
    return f"{hashlib.md5(b''.join(md5s)).hexdigest()}-{len(md5s)}"


def part_digests(data: bytes, part: int, algorithms: tuple[str, ...]) -> list[dict[str, str]]:
    out = []
    for i in range(0, len(data), part):
        digests = {}
        for a in algorithms:
            new = partdigests.hasher(a)
            assert new is not None
            h = new()
            h.update(data[i : i + part])
            digests[a] = h.digest().hex()
        out.append(digests)
    return out


ETAG = multipart_etag(DATA, UPLOAD)
FILE = RemoteFile("w.bin", len(DATA), "m/w.bin", etag=ETAG, checksum_algorithms=("CRC64NVME",))


def test_a_full_object_crc64nvme_is_combined_from_the_download_parts() -> None:
    head = {"ChecksumCRC64NVME": b64(awscrt.checksums.crc64nvme(DATA), 8), "ChecksumType": "FULL_OBJECT"}
    plan = choose(FILE, DOWNLOAD, head, lambda: UPLOAD)

    assert (plan.finish, plan.algorithm, plan.part_size, plan.algorithms) == (
        Finish.COMBINE,
        "CRC64NVME",
        DOWNLOAD,
        ("CRC64NVME",),
    )
    assert plan.check(part_digests(DATA, DOWNLOAD, plan.algorithms), len(DATA))
    damaged = DATA[:5] + b"\0" + DATA[6:]
    assert not plan.check(part_digests(damaged, DOWNLOAD, plan.algorithms), len(DATA))


def test_the_cheapest_checksum_is_chosen_when_an_object_has_several() -> None:
    head = {
        "ChecksumSHA256": base64.b64encode(hashlib.sha256(DATA).digest()).decode(),
        "ChecksumCRC32C": b64(awscrt.checksums.crc32c(DATA), 4),
        "ChecksumType": "FULL_OBJECT",
    }
    assert choose(FILE, DOWNLOAD, head, lambda: UPLOAD).algorithm == "CRC32C"
    expected, _ = s3checksums.computable(s3checksums.from_head(head, 3))
    assert expected is not None and expected.algorithm == "CRC32C"  # the check after landing picks the same


def test_a_composite_sha256_is_checked_at_the_upload_part_size() -> None:
    sha_parts = [hashlib.sha256(DATA[i : i + UPLOAD]).digest() for i in range(0, len(DATA), UPLOAD)]
    value = base64.b64encode(hashlib.sha256(b"".join(sha_parts)).digest()).decode()
    plan = choose(FILE, DOWNLOAD, {"ChecksumSHA256": f"{value}-3", "ChecksumType": "COMPOSITE"}, lambda: UPLOAD)

    assert (plan.finish, plan.algorithm, plan.part_size) == (Finish.COMPOSITE, "SHA256", UPLOAD)
    assert plan.algorithms == (partdigests.local_algorithm(), "SHA256")  # the cheap one re-checks parts on resume
    assert plan.check(part_digests(DATA, UPLOAD, plan.algorithms), len(DATA))


def test_md5_etag_only_when_there_is_no_checksum_and_at_the_upload_part_size() -> None:
    plain = RemoteFile("w.bin", len(DATA), "m/w.bin", etag=ETAG)
    plan = choose(plain, DOWNLOAD, {}, lambda: UPLOAD)

    assert (plan.finish, plan.algorithm, plan.part_size) == (Finish.COMPOSITE, "MD5", UPLOAD)
    assert plan.check(part_digests(DATA, UPLOAD, plan.algorithms), len(DATA))
    assert choose(plain, DOWNLOAD, {}, lambda: None).finish == Finish.REREAD  # upload part size unknown


def test_a_store_that_does_not_say_full_or_composite_gets_both_tried() -> None:
    crc_parts = [awscrt.checksums.crc32(DATA[i : i + UPLOAD]) for i in range(0, len(DATA), UPLOAD)]
    composite = awscrt.checksums.crc32(b"".join(c.to_bytes(4, "big") for c in crc_parts))
    for value in (awscrt.checksums.crc32(DATA), composite):
        plan = choose(FILE, DOWNLOAD, {"ChecksumCRC32": b64(value, 4)}, lambda: UPLOAD)  # no ChecksumType (moto)
        assert (plan.finish, plan.part_size) == (Finish.EITHER, UPLOAD)
        assert plan.check(part_digests(DATA, UPLOAD, plan.algorithms), len(DATA))


@pytest.mark.parametrize("sse", [{"ServerSideEncryption": "aws:kms"}, {"SSECustomerAlgorithm": "AES256"}])
def test_an_encrypted_object_without_checksum_is_left_to_the_check_after_landing(sse: dict[str, str]) -> None:
    plain = RemoteFile("w.bin", len(DATA), "m/w.bin", etag=ETAG)
    assert choose(plain, DOWNLOAD, sse, lambda: UPLOAD).finish == Finish.REREAD


def test_a_small_plain_object_needs_no_head_and_is_checked_by_its_md5() -> None:
    small = DATA[:1000]
    file = RemoteFile("c.json", len(small), "m/c.json", etag=hashlib.md5(small).hexdigest())

    assert not needs_head(file, DOWNLOAD)
    plan = choose(file, DOWNLOAD, None, lambda: None)
    assert (plan.finish, plan.algorithm) == (Finish.WHOLE, "MD5")
    assert plan.check(part_digests(small, DOWNLOAD, plan.algorithms), len(small))
    assert needs_head(RemoteFile("c.json", 10, "k", etag="abc"), DOWNLOAD)  # not MD5-shaped
    assert needs_head(FILE, DOWNLOAD)  # the listing names a checksum
