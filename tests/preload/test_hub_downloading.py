"""The Hugging Face Hub path, through huggingface_hub's real code, against the Hub look-alike server."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest

from preloadhelpers import cache_dir, digests, preload, tree_digests
from preloadhub import HubServer, Repo
from warmstart.preload import store

COMMIT = "a" * 40
OLD_COMMIT = "b" * 40


def hub_source(repo: str, commit: str | None = COMMIT, **extra: object) -> str:
    model: dict[str, object] = {"modelId": repo, **extra}
    if commit:
        model["commitSHA"] = commit
    return json.dumps({"modelSourceType": "huggingface", "huggingFaceModel": model})


def new_repo(hub: HubServer, files: dict[str, bytes], **kwargs: object) -> str:
    repo_id = f"org/model-{uuid.uuid4().hex[:8]}"
    old = {"config.json": b'{"old": true}', "model.safetensors": b"old weights"}
    hub.add(repo_id, Repo(commits={COMMIT: files, OLD_COMMIT: old}, branches={"main": OLD_COMMIT}, **kwargs))  # type: ignore[arg-type]
    return repo_id


def model_files() -> dict[str, bytes]:
    return {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer/tokenizer.json": os.urandom(50_000),
        "model-00001-of-00002.safetensors": os.urandom(3 << 20),
        "model-00002-of-00002.safetensors": os.urandom(1 << 20),
        "original/consolidated.pth": os.urandom(10_000),
    }


def test_commit_pinned_download_with_lfs_and_git_checks(hub: HubServer, env: dict[str, str], root: Path) -> None:
    files = model_files()
    repo = new_repo(hub, files)

    code, result = preload("--source-json", hub_source(repo), "--key", "hub-pinned", root=root)

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", len(files))
    final = cache_dir(root, "hub-pinned")
    assert tree_digests(final) == digests(files)
    manifest = json.loads((final / store.MANIFEST_NAME).read_text())
    assert manifest["commit"] == COMMIT
    shard = next(f for f in manifest["files"] if f["path"] == "model-00001-of-00002.safetensors")
    assert shard["sha256"] == hashlib.sha256(files["model-00001-of-00002.safetensors"]).hexdigest()
    assert "git_sha1" in next(f for f in manifest["files"] if f["path"] == "config.json")
    resolved = [path for method, path, _ in hub.requests if f"/{repo}/resolve/" in path]
    assert resolved and all(f"/resolve/{COMMIT}/" in path for path in resolved)  # pinned: never "main"
    assert not any(name.startswith(".warmstart") and name != store.MANIFEST_NAME for name in os.listdir(final))


def test_unpinned_model_is_pinned_to_main_for_the_download(hub: HubServer, env: dict[str, str], root: Path) -> None:
    repo = new_repo(hub, model_files())
    code, result = preload("--source-json", hub_source(repo, commit=None), "--key", "hub-main", root=root)
    assert (code, result["reason"]) == (0, "Downloaded")
    manifest = json.loads((cache_dir(root, "hub-main") / store.MANIFEST_NAME).read_text())
    assert manifest["commit"] == OLD_COMMIT
    assert (cache_dir(root, "hub-main") / "model.safetensors").read_bytes() == b"old weights"


def test_allow_and_ignore_patterns(hub: HubServer, env: dict[str, str], root: Path) -> None:
    repo = new_repo(hub, model_files())
    source = hub_source(repo, allowPatterns=["*.json", "*.safetensors", "*.pth"], ignorePatterns=["original/*"])
    code, _ = preload("--source-json", source, "--key", "hub-pat", root=root)
    assert code == 0
    assert set(tree_digests(cache_dir(root, "hub-pat"))) == {  # huggingface_hub's fnmatch: '*' crosses '/'
        "config.json",
        "tokenizer/tokenizer.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }


def test_wrong_commit_is_a_clear_not_found(hub: HubServer, env: dict[str, str], root: Path) -> None:
    repo = new_repo(hub, model_files())
    code, result = preload("--source-json", hub_source(repo, commit="c" * 40), "--key", "hub-wrong", root=root)
    assert (code, result["reason"]) == (66, "NotFound")
    assert "revision not found (wrong commitSHA?)" in result["message"] and "c" * 40 in result["message"]


def test_unknown_repo_is_not_found(hub: HubServer, env: dict[str, str], root: Path) -> None:
    code, result = preload("--source-json", hub_source("org/nope"), "--key", "hub-nope", root=root)
    assert (code, result["reason"]) == (66, "NotFound") and "repository not found" in result["message"]


def test_gated_repo_needs_a_token(hub: HubServer, env: dict[str, str], root: Path, tmp_path: Path) -> None:
    token = "hf_" + uuid.uuid4().hex
    files = {"config.json": b"{}", "model.safetensors": os.urandom(100_000)}
    repo = new_repo(hub, files, gated_token=token)

    code, result = preload("--source-json", hub_source(repo), "--key", "hub-gated", root=root)
    assert (code, result["reason"]) == (77, "AccessDenied")
    assert "gated" in result["message"] and "tokenSecretRef" in result["message"]

    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    source = hub_source(repo, tokenSecretRef={"name": "hf", "key": "token"})
    code, result = preload("--source-json", source, "--key", "hub-gated", "--hf-token-file", str(token_file), root=root)
    assert (code, result["reason"]) == (0, "Downloaded")
    assert tree_digests(cache_dir(root, "hub-gated")) == digests(files)
    assert token not in json.dumps(result)


def test_token_from_hf_token_env(
    hub: HubServer, env: dict[str, str], root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "hf_" + uuid.uuid4().hex
    repo = new_repo(hub, {"config.json": b"{}"}, gated_token=token)
    monkeypatch.setenv("HF_TOKEN", token)
    assert preload("--source-json", hub_source(repo), "--key", "hub-env", root=root)[0] == 0


def test_missing_token_secret_is_secret_missing(
    hub: HubServer, env: dict[str, str], root: Path, tmp_path: Path
) -> None:
    repo = new_repo(hub, {"config.json": b"{}"})
    source = hub_source(repo, tokenSecretRef={"name": "hf-token", "key": "token"})
    code, result = preload(
        "--source-json", source, "--key", "hub-nosecret", "--hf-token-file", str(tmp_path / "absent"), root=root
    )
    assert (code, result["reason"]) == (67, "SecretMissing")
    assert "hf-token/token" in result["message"]


def test_lfs_file_whose_bytes_do_not_match_its_sha256_is_refused(
    hub: HubServer, env: dict[str, str], root: Path
) -> None:
    files = {"config.json": b"{}", "model.safetensors": os.urandom(200_000)}
    repo = new_repo(hub, files, corrupt={"model.safetensors"})
    code, result = preload("--source-json", hub_source(repo), "--key", "hub-bad", root=root)
    assert (code, result["reason"]) == (65, "ChecksumMismatch")
    assert "model.safetensors" in result["message"] and "sha256" in result["message"]
    assert not cache_dir(root, "hub-bad").exists()


def test_unreachable_hub_is_retryable(env: dict[str, str], root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from preloadservers import free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    code, result = preload("--source-json", hub_source("org/any"), "--key", "hub-down", root=root)
    assert (code, result["reason"], result["retryable"]) == (75, "NetworkError", True)
