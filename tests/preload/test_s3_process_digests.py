"""`--processes N`: each worker hands back its files' check plans and part digests, so the parent checks every file
from those digests (as the threaded path does) and never reads a downloaded file again; a corrupted part still fails.

The parent's two re-reading checks (the part journal re-check and s3verify's full read) are spied on, and every file
the parent opens is recorded through an audit hook (PEP 578), so a read by any other path shows too: the parent opens
each landed part file once, read-only, to fsync it before the rename, and a re-read is a second open (the control
test shows it). The workers are separate processes and are not touched.
"""

from __future__ import annotations

import io
import logging
import os
import sys
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
from warmstart.preload.store import PART_SUFFIX

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


#: (path, flags) of every file this process opens while a test records; None when no test does
_opened: list[tuple[str, int]] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append((os.fsdecode(args[0]), args[2] if isinstance(args[2], int) else 0))


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records only while `opened_for_reading` is active


@pytest.fixture
def opened_for_reading() -> Iterator[Callable[[Path], list[str]]]:
    """The files under a directory that this process opened without write access while the test ran."""
    global _opened
    _opened = []
    seen = _opened

    def under(directory: Path) -> list[str]:
        prefix = os.path.realpath(directory) + os.sep
        return sorted(
            path
            for path, flags in seen
            if os.path.realpath(path).startswith(prefix) and flags & os.O_ACCMODE == os.O_RDONLY
        )

    yield under
    _opened = None


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
    plain_s3: Any,
    bucket: str,
    root: Path,
    rereads: list[str],
    opened_for_reading: Callable[[Path], list[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    files = upload(plain_s3, bucket)
    with caplog.at_level(logging.DEBUG, logger="warmstart.preload.sources.s3"):
        code, result = run(bucket, "procs", root)
    opened = [os.path.basename(p) for p in opened_for_reading(root)]
    read_back = {p: opened.count(f"{p}{PART_SUFFIX}") for p in files}

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 3), result
    assert read_back == dict.fromkeys(files, 1), f"opened once to fsync, never to read again: {opened}"
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


def test_an_object_without_a_per_part_check_is_read_again_and_the_audit_sees_it(
    plain_s3: Any, bucket: str, root: Path, rereads: list[str], opened_for_reading: Callable[[Path], list[str]]
) -> None:
    """The control of the test above: a full-object SHA256 over several download parts does not combine from the
    parts, so the parent reads the file after it lands, and both the spy and the audit hook record it."""
    body = os.urandom(7 * MIB)
    plain_s3.put_object(Bucket=bucket, Key="m/sha.bin", Body=body, ChecksumAlgorithm="SHA256")

    code, result = run(bucket, "sha", root)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert rereads == ["s3verify.verify"]
    opened = [os.path.basename(p) for p in opened_for_reading(root)]
    assert opened.count(f"sha.bin{PART_SUFFIX}") == 2, f"read once to verify, once to fsync: {opened}"
    assert (cache_dir(root, "sha") / "sha.bin").read_bytes() == body
