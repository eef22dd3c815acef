"""A shared cache filled through an attacker's mirror is never handed to another namespace.

The attack: a tenant points its own preload at a mirror it controls (a Hub look-alike, an S3 server) serving its
weights under the same names, and fills a key that other namespaces share (the `public` key of a Hub model without
token, or a trust group's key). The next namespace's model pod runs `--if-missing` against the real source. Before it
gets files another identity downloaded, it HEADs every cached file with its own credentials and endpoints and
compares each file's size and content id (Hub LFS sha256 or git blob id, S3 ETag) with the manifest: the attacker's
files differ, so it downloads the real ones instead of answering AlreadyPresent. Real servers on both sides: two Hub
look-alikes, two moto S3 servers (one with its IAM checks on).

Reader marks (what the CSI driver mounts a shared key for) follow the content: each preload here runs as the driver
sees a writer (its mount recorded, its proof settled when it ends, csi/proofs.py). A namespace that proved its access
to one content loses its mark when another namespace's re-check publishes changed content, and when its own re-check
is refused by the source.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from preloadhelpers import cache_dir, digests, preload, s3_source, tree_digests
from preloadhub import HubServer, Repo
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api import cachemanifests, preloading
from warmstart.csi import decisions, proofs
from warmstart.render import jobs

COMMIT = "c" * 40
REAL = {"config.json": b'{"model": "real"}', "model.safetensors": b"REAL WEIGHTS " * 1000}
FORGED = {"config.json": b'{"model": "real"}', "model.safetensors": b"ATTACKER WEIGHTS " * 1000}
BUCKET = "group-models"


def as_pod(monkeypatch: pytest.MonkeyPatch, namespace: str, account: str, **env: str) -> None:
    monkeypatch.setenv(cachemanifests.NAMESPACE_ENV, namespace)
    monkeypatch.setenv(cachemanifests.SERVICE_ACCOUNT_ENV, account)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def mirror() -> Iterator[HubServer]:
    server = HubServer().start()
    yield server
    server.stop()


def readers(root: Path, key: str) -> list[str]:
    """The namespaces the CSI driver mounts `key` for on this node: their mark names the key's current content."""
    current = proofs.current_manifest(str(root), str(root), key)
    marks = proofs.read_marks(str(root), str(root), key)
    mark = lambda ns: preloading.reader_mark(str(root), key, ns)  # noqa: E731
    return sorted(ns for ns in marks if proofs.reader_proven(str(root), mark(ns), current))


def as_writer(monkeypatch: pytest.MonkeyPatch, root: Path, key: str, *args: str) -> tuple[int, dict[str, object]]:
    """`preload --admit-reader` as the pod of a preload Job the driver mounted: its proof settled when it ends."""
    uid = str(uuid.uuid4())
    monkeypatch.setenv(preloading.POD_UID_ENV, uid)
    namespace = os.environ[cachemanifests.NAMESPACE_ENV]
    volume = f"csi-{uid}"
    proofs.remember(str(root), volume, decisions.WriterMount(namespace, uid, key, str(root), jobs.ROLE_PRELOAD))
    found = preload(*args, "--key", key, "--admit-reader", root=root)
    proofs.settle((str(root),), volume)
    return found


def hub_source(repo: str) -> str:
    return json.dumps({"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": repo, "commitSHA": COMMIT}})


def test_public_hub_key_filled_through_a_tenants_mirror_is_downloaded_again_by_the_next_namespace(
    hub: HubServer, mirror: HubServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    repo = "org/poisoned"
    hub.add(repo, Repo(commits={COMMIT: REAL}, branches={"main": COMMIT}))
    mirror.add(repo, Repo(commits={COMMIT: FORGED}, branches={"main": COMMIT}))
    as_pod(monkeypatch, "attacker", "default", HF_ENDPOINT=mirror.url)
    code, result = preload("--source-json", hub_source(repo), "--key", "public-key", root=root)
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert tree_digests(cache_dir(root, "public-key")) == digests(FORGED)

    as_pod(monkeypatch, "victim", "default", HF_ENDPOINT=hub.url)
    code, result = preload("--source-json", hub_source(repo), "--key", "public-key", "--if-missing", root=root)

    assert (code, result["reason"]) == (0, "Downloaded"), result  # not AlreadyPresent
    assert tree_digests(cache_dir(root, "public-key")) == digests(REAL)
    heads = [p for method, p, _ in hub.requests if method == "HEAD" and f"/{repo}/resolve/" in p]
    assert sorted(p.rsplit("/", 1)[1] for p in heads[:2]) == sorted(REAL)  # every cached file, not one


def test_public_hub_cache_of_the_same_bytes_is_used_after_every_file_is_checked(
    hub: HubServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    repo = "org/honest"
    hub.add(repo, Repo(commits={COMMIT: REAL}, branches={"main": COMMIT}))
    as_pod(monkeypatch, "team-a", "default", HF_ENDPOINT=hub.url)
    filled = as_writer(monkeypatch, root, "public-ok", "--source-json", hub_source(repo))
    assert filled[1]["reason"] == "Downloaded"
    assert readers(root, "public-ok") == ["team-a"]
    before = len(hub.requests)

    as_pod(monkeypatch, "team-b", "default", HF_ENDPOINT=hub.url)
    code, result = as_writer(monkeypatch, root, "public-ok", "--source-json", hub_source(repo), "--if-missing")

    assert (code, result["reason"]) == (0, "AlreadyPresent"), result
    assert readers(root, "public-ok") == ["team-a", "team-b"]  # the CSI driver now mounts the key for team-b
    assert "content of its 2 files re-checked" in result["message"]
    checked = [(m, p) for m, p, _ in hub.requests[before:] if f"/{repo}/resolve/" in p]
    assert sorted(p.rsplit("/", 1)[1] for m, p in checked if m == "HEAD") == sorted(REAL)
    assert not [p for m, p, _ in hub.requests[before:] if m == "GET"], "nothing downloaded"


@pytest.fixture(scope="module")
def attacker_s3() -> Iterator[MotoServer]:
    server = MotoServer().start()
    yield server
    server.stop()


def _fill(url: str, files: dict[str, bytes]) -> None:
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_keys(CREDENTIALS))
    s3.create_bucket(Bucket=BUCKET)
    for path, body in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"m/{path}", Body=body)


def _keys(creds: dict[str, str]) -> dict[str, str]:
    return {"aws_access_key_id": creds["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": creds["AWS_SECRET_ACCESS_KEY"]}


def test_trust_group_s3_key_filled_through_a_tenants_endpoint_is_downloaded_again(
    moto: MotoServer, attacker_s3: MotoServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    _fill(moto.url, REAL)
    _fill(attacker_s3.url, FORGED)
    source = s3_source(BUCKET, "m")
    as_pod(monkeypatch, "group-member-a", "default", AWS_ENDPOINT_URL_S3=attacker_s3.url)
    assert preload("--source-json", source, "--key", "group-key", root=root)[1]["reason"] == "Downloaded"
    assert tree_digests(cache_dir(root, "group-key")) == digests(FORGED)

    as_pod(monkeypatch, "group-member-b", "default", AWS_ENDPOINT_URL_S3=moto.url)
    code, result = preload("--source-json", source, "--key", "group-key", "--if-missing", root=root)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert tree_digests(cache_dir(root, "group-key")) == digests(REAL)


@pytest.fixture(scope="module")
def iam_moto() -> Iterator[tuple[MotoServer, dict[str, dict[str, str]]]]:
    """moto with IAM on: `reader` may read the model; `half` may read m/config.json only (the file sorted first),
    not the weights."""
    server = MotoServer(env=CREDENTIALS).start()
    _fill(server.url, REAL)
    iam = boto3.client("iam", endpoint_url=server.url, region_name="us-east-1", **_keys(CREDENTIALS))
    statements = {
        "reader": [{"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": "*"}],
        "half": [
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"arn:aws:s3:::{BUCKET}/m/config.json"},
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": f"arn:aws:s3:::{BUCKET}"},
        ],
    }
    users = {}
    for user, statement in statements.items():
        iam.create_user(UserName=user)
        policy = {"Version": "2012-10-17", "Statement": statement}
        iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        users[user] = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    server.set_auth(0)
    yield server, users
    server.stop()


def test_access_to_one_cached_file_does_not_hand_out_the_others(
    iam_moto: tuple[MotoServer, dict[str, dict[str, str]]],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
) -> None:
    server, users = iam_moto
    source = s3_source(BUCKET, "m")
    as_pod(monkeypatch, "team-a", "reader", AWS_ENDPOINT_URL_S3=server.url, **users["reader"])
    assert preload("--source-json", source, "--key", "shared", root=root)[1]["reason"] == "Downloaded"

    as_pod(monkeypatch, "team-b", "default", AWS_ENDPOINT_URL_S3=server.url, **users["half"])
    code, result = as_writer(monkeypatch, root, "shared", "--source-json", source, "--if-missing")

    assert (code, result["reason"]) == (77, "AccessDenied"), result
    assert readers(root, "shared") == []  # the CSI driver never mounts the key for team-b
    assert "model.safetensors" in result["message"]


def test_a_recheck_the_source_refuses_removes_that_namespaces_mark(
    iam_moto: tuple[MotoServer, dict[str, dict[str, str]]],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
) -> None:
    server, users = iam_moto
    source = s3_source(BUCKET, "m")
    as_pod(monkeypatch, "team-a", "reader", AWS_ENDPOINT_URL_S3=server.url, **users["reader"])
    assert as_writer(monkeypatch, root, "revoked", "--source-json", source)[1]["reason"] == "Downloaded"
    as_pod(monkeypatch, "team-b", "reader", AWS_ENDPOINT_URL_S3=server.url, **users["reader"])
    assert as_writer(monkeypatch, root, "revoked", "--source-json", source, "--if-missing")[1]["reason"] == (
        "AlreadyPresent"
    )
    assert readers(root, "revoked") == ["team-a", "team-b"]

    # team-b's access to the weights is revoked at the source; its next preload on the node re-checks
    as_pod(monkeypatch, "team-b", "half", AWS_ENDPOINT_URL_S3=server.url, **users["half"])
    code, result = as_writer(monkeypatch, root, "revoked", "--source-json", source, "--if-missing")
    assert (code, result["reason"]) == (77, "AccessDenied"), result
    assert readers(root, "revoked") == ["team-a"]  # the driver no longer mounts the key for team-b


def test_a_republish_of_changed_content_clears_the_marks_proven_for_the_old_content(
    moto: MotoServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, root: Path
) -> None:
    s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", **_keys(CREDENTIALS))
    s3.create_bucket(Bucket="republished")
    for path, body in REAL.items():
        s3.put_object(Bucket="republished", Key=f"m/{path}", Body=body)
    source = s3_source("republished", "m")
    for namespace in ("team-a", "team-b"):
        as_pod(monkeypatch, namespace, "default", AWS_ENDPOINT_URL_S3=moto.url)
        assert as_writer(monkeypatch, root, "group", "--source-json", source, "--if-missing")[0] == 0
    assert readers(root, "group") == ["team-a", "team-b"]

    # the object changes in place at the source; team-c's re-check downloads the new content into the key
    s3.put_object(Bucket="republished", Key="m/model.safetensors", Body=b"NEW WEIGHTS " * 1000)
    as_pod(monkeypatch, "team-c", "default", AWS_ENDPOINT_URL_S3=moto.url)
    code, result = as_writer(monkeypatch, root, "group", "--source-json", source, "--if-missing")
    assert (code, result["reason"]) == (0, "Downloaded"), result

    # team-a and team-b proved access to the old objects only: the driver mounts the new content for team-c alone
    assert readers(root, "group") == ["team-c"]
    as_pod(monkeypatch, "team-b", "default", AWS_ENDPOINT_URL_S3=moto.url)
    assert as_writer(monkeypatch, root, "group", "--source-json", source, "--if-missing")[1]["reason"] == (
        "AlreadyPresent"
    )
    assert readers(root, "group") == ["team-b", "team-c"]  # team-b proved the new content
