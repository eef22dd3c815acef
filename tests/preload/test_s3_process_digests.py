"""`--processes N`: each worker hands back its files' check plans and part digests, so the parent checks every file
from those digests (as the threaded path does) and never reads a downloaded file again; a corrupted part still fails.

The parent's two re-reading checks (the part journal re-check and s3verify's full read) are spied on; the workers
are separate processes and are not touched.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest
from boto3.s3.transfer import TransferConfig

from preloadhelpers import cache_dir, preload, s3_source
from preloadservers import CorruptingProxy, MotoServer
from warmstart.preload import partjournal
from warmstart.preload.sources import s3verify

MIB = 1 << 20


@pytest.fixture
def plain_s3(moto: MotoServer, env: dict[str, str]) -> Any:
    """A client that adds no checksum of its own, so each object carries exactly the check the test gives it."""
    config = botocore.config.Config(request_checksum_calculation="when_required")
    return boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", config=config)


@pytest.fixture
def rereads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Calls of the parent's checks that read a landed file from disk."""
    calls: list[str] = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(s3verify, "verify", spy("s3verify.verify", s3verify.verify))
    monkeypatch.setattr(partjournal, "recheck", spy("partjournal.recheck", partjournal.recheck))
    return calls


@pytest.fixture
def proxies() -> Iterator[list[CorruptingProxy]]:
    started: list[CorruptingProxy] = []
    yield started
    for proxy in started:
        proxy.stop()


def upload(s3: Any, bucket: str, multipart: bool = True) -> dict[str, bytes]:
    """Objects each checked per part in its own way: a SHA256 checksum (one part), a plain MD5 ETag (one part) and,
    with `multipart`, a multipart MD5 ETag (composite of 5 MiB parts; its part size comes from a HEAD with
    PartNumber, whose Content-Length the corrupting proxy does not pass on)."""
    files = {"a.bin": os.urandom(3 * MIB + 11), "c.bin": os.urandom(2 * MIB)}
    s3.put_object(Bucket=bucket, Key="m/a.bin", Body=files["a.bin"], ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=bucket, Key="m/c.bin", Body=files["c.bin"])
    if multipart:
        files["b.bin"] = os.urandom(12 * MIB + 5)
        config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
        s3.upload_fileobj(io.BytesIO(files["b.bin"]), bucket, "m/b.bin", Config=config)
    return files


def run(bucket: str, key: str, root: Path) -> tuple[int, dict[str, Any]]:
    args = ["--source-json", s3_source(bucket, "m"), "--key", key, "--processes", "2", "--part-size-mb", "5"]
    return preload(*args, root=root)


def test_the_parent_checks_files_from_the_workers_part_digests_without_reading_them(
    plain_s3: Any, bucket: str, root: Path, rereads: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    files = upload(plain_s3, bucket)
    with caplog.at_level(logging.DEBUG, logger="warmstart.preload.sources.s3"):
        code, result = run(bucket, "procs", root)

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 3), result
    assert {p: (cache_dir(root, "procs") / p).read_bytes() for p in files} == files
    assert rereads == [], "the parent read landed files again instead of using the workers' digests"
    checked = {r.getMessage().split(": ")[0] for r in caplog.records if "(part by part)" in r.getMessage()}
    assert checked == {f"s3://{bucket}/m/{p}" for p in files}


def test_a_corrupted_part_fetched_by_a_worker_is_caught_from_its_digest(
    plain_s3: Any,
    bucket: str,
    root: Path,
    moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
    proxies: list[CorruptingProxy],
    rereads: list[str],
) -> None:
    upload(plain_s3, bucket, multipart=False)
    proxies.append(CorruptingProxy(moto.url, {f"/{bucket}/m/a.bin"}))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxies[0].url)

    code, result = run(bucket, "corrupt", root)

    assert (code != 0, result["reason"]) == (True, "ChecksumMismatch"), result
    assert "a.bin" in result["message"] and "SHA256" in result["message"], result["message"]
    assert rereads == [], "the mismatch came from the returned digests, not from reading the file again"
    assert not cache_dir(root, "corrupt").exists()
