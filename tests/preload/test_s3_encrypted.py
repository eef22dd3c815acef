"""S3 objects whose ETag is not their MD5 (SSE-KMS, SSE-C) and objects with additional checksums.

moto encrypts with SSE-KMS but still returns the MD5 as ETag, so a proxy shows another ETag for chosen objects
(what S3 does for SSE-KMS and SSE-C) and, where asked, flips a byte of the body.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest
from boto3.s3.transfer import TransferConfig

from preloadhelpers import cache_dir, preload, s3_source
from preloadservers import CorruptingProxy, MotoServer

MIB = 1 << 20


@pytest.fixture
def plain_s3(moto: MotoServer, env: dict[str, str]) -> Any:
    """A client that adds no checksum of its own (botocore adds CRC32 to every upload by default)."""
    config = botocore.config.Config(request_checksum_calculation="when_required")
    return boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", config=config)


def upload(s3: Any, bucket: str, key: str, data: bytes, part_size: int | None = None, **extra: str) -> str:
    """Upload (multipart with `part_size`), return the real ETag."""
    if part_size is None:
        s3.put_object(Bucket=bucket, Key=key, Body=data, **extra)
    else:
        config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size)
        s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=config, ExtraArgs=extra)
    etag: str = s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    return etag


def not_md5(etag: str) -> str:
    """Another ETag of the same shape: 32 hex digits (and the "-N" of a multipart one), not the content's MD5."""
    digest, dash, parts = etag.partition("-")
    return hashlib.md5(digest.encode(), usedforsecurity=False).hexdigest() + dash + parts


@pytest.fixture
def through_proxy(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CorruptingProxy]]:
    """The proxies `via_proxy` starts, stopped after the test."""
    proxies: list[CorruptingProxy] = []
    yield proxies
    for proxy in proxies:
        proxy.stop()


def via_proxy(
    proxies: list[CorruptingProxy],
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    etags: dict[str, str],
    corrupt: set[str] | None = None,
) -> None:
    proxy = CorruptingProxy(moto.url, corrupt or set(), etags)
    proxies.append(proxy)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)


def run(bucket: str, key: str, root: Path) -> tuple[int, dict[str, Any]]:
    return preload("--source-json", s3_source(bucket, "m"), "--key", key, "--part-size-mb", "5", root=root)


@pytest.mark.parametrize("part_size", [None, 5 * MIB], ids=["single-part", "multipart"])
def test_sse_kms_object_without_checksum_is_checked_by_size(
    plain_s3: Any,
    bucket: str,
    root: Path,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    through_proxy: list[CorruptingProxy],
    caplog: pytest.LogCaptureFixture,
    part_size: int | None,
) -> None:
    data = os.urandom(12 * MIB)
    etag = upload(plain_s3, bucket, "m/weights.bin", data, part_size, ServerSideEncryption="aws:kms")
    assert "ChecksumCRC32" not in plain_s3.head_object(Bucket=bucket, Key="m/weights.bin", ChecksumMode="ENABLED")
    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)})
    with caplog.at_level(logging.WARNING):
        code, result = run(bucket, "kms", root)
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert (cache_dir(root, "kms") / "weights.bin").read_bytes() == data
    assert any("checked by size only" in r.message and "SSE-KMS" in r.message for r in caplog.records)


def test_sse_kms_object_is_verified_by_its_checksum(
    s3: Any,
    bucket: str,
    root: Path,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    through_proxy: list[CorruptingProxy],
) -> None:
    data = os.urandom(12 * MIB)
    etag = upload(s3, bucket, "m/weights.bin", data, ServerSideEncryption="aws:kms", ChecksumAlgorithm="CRC32")
    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)})
    code, result = run(bucket, "kms", root)
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert (cache_dir(root, "kms") / "weights.bin").read_bytes() == data

    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)}, corrupt={f"/{bucket}/m/weights.bin"})
    code, result = run(bucket, "kms-corrupt", root)
    assert result["reason"] == "ChecksumMismatch" and code != 0, result
    assert "CRC32" in result["message"] and "weights.bin" in result["message"], result["message"]
    assert not cache_dir(root, "kms-corrupt").exists()


@pytest.mark.parametrize(
    ("algorithm", "part_size"),
    [("SHA256", None), ("CRC32", None), ("SHA256", 5 * MIB), ("SHA1", 5 * MIB)],
    ids=["sha256", "crc32", "sha256-multipart", "sha1-multipart"],
)
def test_an_additional_checksum_is_what_verifies_the_object(
    s3: Any,
    bucket: str,
    root: Path,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    through_proxy: list[CorruptingProxy],
    algorithm: str,
    part_size: int | None,
) -> None:
    """The ETag shown is not the MD5 (and the object is not encrypted): only the checksum can pass it."""
    data = os.urandom(12 * MIB)
    etag = upload(s3, bucket, "m/weights.bin", data, part_size, ChecksumAlgorithm=algorithm)
    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)})
    code, result = run(bucket, "ok", root)
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert (cache_dir(root, "ok") / "weights.bin").read_bytes() == data

    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)}, corrupt={f"/{bucket}/m/weights.bin"})
    code, result = run(bucket, "bad", root)
    assert result["reason"] == "ChecksumMismatch" and code != 0, result
    assert algorithm in result["message"], result["message"]


def test_a_wrong_md5_etag_without_checksum_or_encryption_still_fails(
    plain_s3: Any,
    bucket: str,
    root: Path,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    through_proxy: list[CorruptingProxy],
) -> None:
    """Only SSE-KMS/SSE-C excuse an ETag that is not the MD5: a plain object whose bytes differ is corrupt."""
    etag = upload(plain_s3, bucket, "m/weights.bin", os.urandom(MIB))
    via_proxy(through_proxy, moto, monkeypatch, {etag: not_md5(etag)})
    code, result = run(bucket, "plain", root)
    assert result["reason"] == "ChecksumMismatch" and code != 0, result
    assert "ETag" in result["message"], result["message"]
