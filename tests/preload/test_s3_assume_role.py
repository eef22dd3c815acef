"""A role for the download (JumpStart's gatedModelDownloadRole): the preload assumes it through STS, with the pod's
own credentials, and reads the bucket as that role. moto's real server with its IAM checks on plays S3, STS and IAM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from preloadhelpers import cache_dir, digests, preload, tree_digests
from preloadservers import CREDENTIALS, MotoServer

FILES = {"config.json": b"{}", "model.safetensors": b"gated weights" * 1000}
BUCKET = "jumpstart-private-cache"


def allow(*actions: str) -> str:
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": list(actions), "Resource": "*"}]}
    )


@pytest.fixture(scope="module")
def gated_store() -> Iterator[tuple[MotoServer, dict[str, dict[str, str]], str]]:
    """A bucket only a role may read; a pod user that may assume it, and one that may not."""
    server = MotoServer(env=CREDENTIALS).start()
    admin = dict(
        endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    s3.create_bucket(Bucket=BUCKET)
    for name, data in FILES.items():
        s3.put_object(Bucket=BUCKET, Key=f"llama/{name}", Body=data)
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
    }
    role = iam.create_role(RoleName="GatedModelDownload", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(
        RoleName="GatedModelDownload", PolicyName="read", PolicyDocument=allow("s3:ListBucket", "s3:GetObject")
    )
    users = {}
    for name, actions in (("pod", ["sts:AssumeRole"]), ("stranger", ["s3:ListBucket"])):
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=allow(*actions))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        users[name] = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    server.set_auth(0)
    yield server, users, role
    server.stop()


def source(role: str | None) -> str:
    s3: dict[str, str] = {"bucketName": BUCKET, "region": "us-east-1"}
    if role:
        s3["roleArn"] = role
    return json.dumps({"modelSourceType": "s3", "s3Storage": s3, "modelLocation": "llama"})


def as_pod(monkeypatch: pytest.MonkeyPatch, server: MotoServer, creds: dict[str, str]) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", server.url)
    for key, value in creds.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_role_reads_what_the_pod_alone_may_not(
    gated_store: tuple[MotoServer, dict[str, dict[str, str]], str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    processes: str,
) -> None:
    server, users, role = gated_store
    as_pod(monkeypatch, server, users["pod"])
    code, result = preload("--source-json", source(None), "--key", "direct", root=root)
    assert (code, result["reason"]) != (0, "Downloaded")
    assert result["reason"] == "AccessDenied"

    code, result = preload("--source-json", source(role), "--key", "gated", "--processes", processes, root=root)
    assert (code, result["outcome"], result["reason"]) == (0, "Succeeded", "Downloaded")
    assert tree_digests(cache_dir(root, "gated")) == digests(FILES)


def test_a_pod_that_may_not_assume_the_role_is_access_denied(
    gated_store: tuple[MotoServer, dict[str, dict[str, str]], str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
) -> None:
    server, users, role = gated_store
    as_pod(monkeypatch, server, users["stranger"])
    code, result = preload("--source-json", source(role), "--key", "gated", root=root)
    assert code != 0
    assert result["reason"] == "AccessDenied"
    assert "sts:AssumeRole" in result["message"] and role in result["message"]
    assert not cache_dir(root, "gated").exists()
