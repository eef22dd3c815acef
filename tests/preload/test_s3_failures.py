"""S3 failures, each with its reason and exit code: not found, access denied (moto's IAM checks), corruption,
capacity, a path escaping the cache, bad input. Nothing partial is ever published."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from preloadhelpers import cache_dir, preload, put, s3_source
from preloadservers import CREDENTIALS, CorruptingProxy, MotoServer
from warmstart.api import preloading

MIB = 1 << 20


def assert_failed(code: int, result: dict[str, Any], reason: str, *words: str) -> None:
    assert result["outcome"] == "Failed" and result["reason"] == reason, result
    assert code == preloading.exit_code(preloading.Reason(reason)) and code != 0
    for word in words:
        assert word in result["message"], result["message"]


def test_missing_bucket_is_not_found(env: dict[str, str], root: Path) -> None:
    code, result = preload("--source-json", s3_source("no-such-bucket-here", "m"), "--key", "k", root=root)
    assert_failed(code, result, "NotFound", "no-such-bucket-here", "bucket not found")
    assert result["retryable"] is False
    assert not cache_dir(root, "k").exists()


def test_empty_prefix_is_not_found_with_a_hint(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "other/a.bin", b"a")
    code, result = preload("--source-json", s3_source(bucket, "llama"), "--key", "k", root=root)
    assert_failed(code, result, "NotFound", "no objects under this prefix", f"s3://{bucket}/llama/")


@pytest.fixture(scope="module")
def locked_moto() -> Iterator[tuple[MotoServer, dict[str, dict[str, str]]]]:
    """A moto server with IAM checks on: a user who may list but not read, one who may do nothing."""
    server = MotoServer(env=CREDENTIALS).start()
    admin = dict(
        endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    s3.create_bucket(Bucket="private-models")
    s3.put_object(Bucket="private-models", Key="m/a.bin", Body=b"secret weights")
    s3.put_object(Bucket="private-models", Key="m/b.bin", Body=b"more secret weights")
    users = {}
    for name, actions in (("lister", ["s3:ListBucket"]), ("nobody", [])):
        iam.create_user(UserName=name)
        if actions:
            policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
            iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        users[name] = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    server.set_auth(0)
    yield server, users
    server.stop()


@pytest.mark.parametrize(("user", "processes"), [("lister", "1"), ("nobody", "1"), ("lister", "2")])
def test_access_denied_by_iam(
    locked_moto: tuple[MotoServer, dict[str, dict[str, str]]],
    user: str,
    processes: str,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
) -> None:
    server, users = locked_moto
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.url)
    for k, v in users[user].items():
        monkeypatch.setenv(k, v)
    code, result = preload(
        "--source-json", s3_source("private-models", "m"), "--key", "k", "--processes", processes, root=root
    )
    assert_failed(code, result, "AccessDenied", "access denied", "IAM role")
    assert not cache_dir(root, "k").exists()


def test_unknown_access_key_is_access_denied(
    locked_moto: tuple[MotoServer, dict[str, dict[str, str]]],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", locked_moto[0].url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNUNKNOWN00")
    code, result = preload("--source-json", s3_source("private-models", "m"), "--key", "k", root=root)
    assert_failed(code, result, "AccessDenied")


@pytest.mark.parametrize("part_size", [None, 5 * MIB], ids=["single-part", "multipart"])
def test_a_store_returning_corrupt_bytes_is_detected(
    s3: Any, bucket: str, root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch, part_size: int | None
) -> None:
    good = os.urandom(12 * MIB)
    put(s3, bucket, "m/weights.bin", good, part_size=part_size)
    put(s3, bucket, "m/config.json", b"{}")
    proxy = CorruptingProxy(moto.url, {f"/{bucket}/m/weights.bin"})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    try:
        code, result = preload(
            "--source-json", s3_source(bucket, "m"), "--key", "bad", "--part-size-mb", "5", root=root
        )
    finally:
        proxy.stop()
    assert_failed(code, result, "ChecksumMismatch", "weights.bin")
    assert not cache_dir(root, "bad").exists()
    staged = root / "warmstart" / "keys" / "bad" / ".staging"
    assert not (staged / "weights.bin").exists()  # the bad file is not kept for a resume
    if part_size is not None:  # caught by our ETag check after the download: the other file is kept
        assert (staged / "config.json").read_bytes() == b"{}"
    # (single-part: botocore's own CRC check may catch it mid-transfer, which stops the other transfers)

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.url)  # the store is healthy again: the retry completes
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "bad", "--part-size-mb", "5", root=root)
    assert (code, result["reason"]) == (0, "Downloaded")
    if part_size is not None:
        assert "1 kept" in result["message"]
    assert (cache_dir(root, "bad") / "weights.bin").read_bytes() == good


def test_capacity_preflight_refuses_before_writing(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a" * 1000)
    free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
    code, result = preload(
        "--source-json", s3_source(bucket, "m"), "--key", "huge", "--expected-bytes", str(free * 2), root=root
    )
    assert_failed(code, result, "InsufficientCapacity", "bytes", "available")
    staged = root / "warmstart" / "keys" / "huge" / ".staging"
    assert not cache_dir(root, "huge").exists() and not any(p.is_file() for p in staged.rglob("*"))


def test_a_key_escaping_the_prefix_is_refused(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/ok.bin", b"a")
    put(s3, bucket, "m/../../etc/evil", b"x")  # S3 keys are opaque strings: '..' is legal there
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "k", root=root)
    assert_failed(code, result, "PathEscape", "..")
    assert not (root / "etc").exists() and not cache_dir(root, "k").exists()


@pytest.mark.parametrize("location", ["/abs/path", "m/../../x"])
def test_model_location_must_stay_relative(env: dict[str, str], root: Path, location: str) -> None:
    code, result = preload("--source-json", s3_source("bucket-x", location), "--key", "k", root=root)
    assert_failed(code, result, "PathEscape", "modelLocation")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--source-json", "{not json", "--key", "k"], ["--source-json"]),
        (["--source-json", '{"modelSourceType": "s3"}', "--key", "k"], ["s3Storage"]),
        (["--source-json", '{"modelSourceType": "s3"}', "--key", "Bad_Key"], ["cache key"]),
    ],
)
def test_bad_input_is_invalid_source(env: dict[str, str], root: Path, args: list[str], words: list[str]) -> None:
    code, result = preload(*args, root=root)
    assert_failed(code, result, "InvalidSource", *words)


def test_unreachable_store_is_retryable(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    from preloadservers import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code, result = preload("--source-json", s3_source("bucket-x", "m"), "--key", "k", root=root)
    assert_failed(code, result, "NetworkError")
    assert code == preloading.EXIT_RETRYABLE and result["retryable"] is True
