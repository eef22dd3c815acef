"""A cache another identity downloaded is handed out only after this pod proved its own access to the source.

moto's S3 server with its IAM checks on: `reader` may list and read the private bucket, `nobody` may do nothing.
The producer downloads as team-a; a pod of team-b with the same key (a shared key, as in an admin trust group)
runs the warm path `--if-missing`: without access it gets AccessDenied, never AlreadyPresent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from preloadhelpers import cache_dir, preload, s3_source
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api import cachemanifests

BUCKET = "private-models"
WEIGHTS = {"m/a.bin": b"secret weights", "m/b.bin": b"more secret weights"}
Users = dict[str, dict[str, str]]


@pytest.fixture(scope="module")
def iam_moto() -> Iterator[tuple[MotoServer, Users]]:
    server = MotoServer(env=CREDENTIALS).start()
    admin = dict(
        endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
    s3.create_bucket(Bucket=BUCKET)
    for key, body in WEIGHTS.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    users: Users = {}
    for name, actions in (("reader", ["s3:ListBucket", "s3:GetObject"]), ("nobody", [])):
        iam.create_user(UserName=name)
        if actions:
            policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
            iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
        created = iam.create_access_key(UserName=name)["AccessKey"]
        users[name] = {"AWS_ACCESS_KEY_ID": created["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": created["SecretAccessKey"]}
    server.set_auth(0)
    yield server, users
    server.stop()


def as_pod(
    monkeypatch: pytest.MonkeyPatch, server_url: str, namespace: str, account: str, creds: dict[str, str] | None
) -> None:
    """The environment a preload container of this namespace and service account has."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server_url)
    monkeypatch.setenv(cachemanifests.NAMESPACE_ENV, namespace)
    monkeypatch.setenv(cachemanifests.SERVICE_ACCOUNT_ENV, account)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in (creds or {}).items():
        monkeypatch.setenv(k, v)


def warm(root: Path) -> tuple[int, dict[str, object]]:
    return preload("--source-json", s3_source(BUCKET, "m"), "--key", "shared", "--if-missing", root=root)


@pytest.fixture
def produced(iam_moto: tuple[MotoServer, Users], monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    """team-a's preload downloaded the private model into key `shared`."""
    server, users = iam_moto
    as_pod(monkeypatch, server.url, "team-a", "reader-sa", users["reader"])
    code, result = warm(root)
    assert code == 0 and result["reason"] == "Downloaded", result
    manifest = json.loads((cache_dir(root, "shared") / ".warmstart-manifest.json").read_text())
    assert manifest["producer"] == {"namespace": "team-a", "serviceAccount": "reader-sa"}
    return cache_dir(root, "shared")


@pytest.mark.parametrize("creds", ["nobody", None], ids=["denied-by-iam", "no-credentials"])
def test_another_namespace_without_access_gets_access_denied_not_the_files(
    produced: Path, iam_moto: tuple[MotoServer, Users], monkeypatch: pytest.MonkeyPatch, root: Path, creds: str | None
) -> None:
    server, users = iam_moto
    as_pod(monkeypatch, server.url, "team-b", "default", users[creds] if creds else None)
    code, result = warm(root)
    assert result["reason"] == "AccessDenied" and code == 77, result
    assert result["outcome"] == "Failed"
    assert (produced / "a.bin").read_bytes() == WEIGHTS["m/a.bin"]  # team-a's cache is left alone


def test_another_identity_with_access_uses_the_cache_after_one_check(
    produced: Path, iam_moto: tuple[MotoServer, Users], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    server, users = iam_moto
    as_pod(monkeypatch, server.url, "team-b", "model-sa", users["reader"])
    code, result = warm(root)
    assert code == 0 and result["reason"] == "AlreadyPresent", result
    assert "re-checked" in str(result["message"])


def test_the_same_identity_uses_its_cache_without_contacting_the_source(
    produced: Path, iam_moto: tuple[MotoServer, Users], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    as_pod(monkeypatch, "http://127.0.0.1:9", "team-a", "reader-sa", None)  # no server, no credentials
    code, result = warm(root)
    assert code == 0 and result["reason"] == "AlreadyPresent", result
    assert "re-checked" not in str(result["message"])


def test_a_cache_without_a_recorded_producer_is_rechecked(
    produced: Path, iam_moto: tuple[MotoServer, Users], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    """Caches written before identities were recorded (or by hand) are never trusted blindly."""
    path = produced / ".warmstart-manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["producer"]
    path.write_text(json.dumps(manifest))
    server, users = iam_moto
    as_pod(monkeypatch, server.url, "team-a", "reader-sa", users["nobody"])
    code, result = warm(root)
    assert result["reason"] == "AccessDenied" and code == 77, result
