"""Symlinks planted at every level of the node cache never make a preload write or delete outside the cache.

Each test plants a link to a `victim` directory or file outside the cache, runs a real preload (a PVC source: a
local directory, so no server is needed) and checks the victim is untouched and the cache is real files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from preloadhelpers import cache_dir, preload

KEY = "k"
SOURCE = json.dumps(
    {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "m"}, "modelLocation": "m"}
)
MODEL = {"a.bin": b"weights", "sub/b.bin": b"more weights"}


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    for rel, body in MODEL.items():
        (tmp_path / "mnt" / "m" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mnt" / "m" / rel).write_bytes(body)
    return tmp_path / "mnt"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Files outside the cache that a planted link points at."""
    v = tmp_path / "victim"
    (v / "sub").mkdir(parents=True)
    (v / "precious").write_bytes(b"precious")
    (v / "a.bin").write_bytes(b"precious")
    (v / "sub" / "b.bin").write_bytes(b"precious")
    return v


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "nvme"
    tree(r).mkdir(parents=True)
    return r


def tree(root: Path) -> Path:
    """The key's own tree: all a preload of the key ever writes."""
    return root / "warmstart" / "keys" / KEY


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def run(root: Path, mount: Path, *extra: str) -> tuple[int, dict[str, object]]:
    return preload("--source-json", SOURCE, "--key", KEY, "--mount-root", str(mount), *extra, root=root)


def assert_real_cache(root: Path) -> None:
    final = cache_dir(root, KEY)
    assert final.is_dir() and not final.is_symlink()
    for rel, body in MODEL.items():
        path = final / rel
        assert not path.is_symlink() and not path.parent.is_symlink() and path.read_bytes() == body


@pytest.mark.parametrize("if_missing", [False, True], ids=["job", "init-container"])
def test_a_planted_staging_link_is_dropped_not_followed(
    root: Path, mount: Path, victim: Path, if_missing: bool
) -> None:
    before = snapshot(victim)
    (tree(root) / ".staging").symlink_to(victim)
    code, result = run(root, mount, *(["--if-missing"] if if_missing else []))
    assert code == 0 and result["reason"] == "Downloaded", result
    assert snapshot(victim) == before  # nothing deleted by the sweep, nothing published into the target
    assert_real_cache(root)


def test_a_planted_cache_link_with_a_forged_manifest_is_not_a_cache(root: Path, mount: Path, victim: Path) -> None:
    forged = {"formatVersion": 1, "key": KEY, "completedAt": "x", "totalBytes": 8,
              "files": [{"path": "precious", "size": 8}]}  # fmt: skip
    (victim / ".warmstart-manifest.json").write_text(json.dumps(forged))
    before = snapshot(victim)
    (tree(root) / "model").symlink_to(victim)
    code, result = run(root, mount, "--if-missing")
    assert code == 0 and result["reason"] == "Downloaded", result
    assert snapshot(victim) == before
    assert_real_cache(root)


@pytest.mark.parametrize("level", ["warmstart", "warmstart/keys", f"warmstart/keys/{KEY}"])
def test_a_link_on_the_way_to_the_keys_tree_is_refused(tmp_path: Path, mount: Path, victim: Path, level: str) -> None:
    root = tmp_path / "nvme"
    (root / level).parent.mkdir(parents=True)
    (root / level).symlink_to(victim)
    before = snapshot(victim)
    code, result = run(root, mount)
    assert result["reason"] == "PathEscape" and code != 0, result
    assert snapshot(victim) == before and not (victim / KEY).exists() and not (victim / "keys").exists()
    code, result = preload("--delete", KEY, root=root)
    assert result["reason"] == "PathEscape", result
    assert snapshot(victim) == before


@pytest.mark.parametrize(
    "planted",
    ["a.bin.warmstart-part", "sub", "sub/b.bin.warmstart-part", ".warmstart-journal.jsonl", ".warmstart-tmp"],
)
def test_links_inside_staging_are_replaced_not_written_through(
    root: Path, mount: Path, victim: Path, planted: str
) -> None:
    staging = tree(root) / ".staging"
    (staging / planted).parent.mkdir(parents=True, exist_ok=True)
    target = victim / "sub" if planted in ("sub", ".warmstart-tmp") else victim / "precious"
    (staging / planted).symlink_to(target)
    before = snapshot(victim)
    code, result = run(root, mount)
    assert code == 0 and result["reason"] == "Downloaded", result
    assert snapshot(victim) == before
    assert_real_cache(root)


def test_a_planted_lock_link_creates_nothing_at_its_target(root: Path, mount: Path, tmp_path: Path) -> None:
    target = tmp_path / "created-through-the-link"
    (tree(root) / ".lock").symlink_to(target)
    code, result = run(root, mount)
    assert code == 0, result
    assert not target.exists()
    assert_real_cache(root)


def test_a_planted_old_link_is_replaced_when_a_cache_is_republished(root: Path, mount: Path, victim: Path) -> None:
    assert run(root, mount)[0] == 0
    (cache_dir(root, KEY) / "a.bin").write_bytes(b"changed size!")  # no longer complete: the rerun publishes again
    (tree(root) / f".old-{os.getpid()}").symlink_to(victim)
    before = snapshot(victim)
    code, result = run(root, mount)
    assert code == 0 and result["reason"] == "Downloaded", result
    assert snapshot(victim) == before
    assert_real_cache(root)


def test_delete_removes_a_linked_cache_entry_but_not_its_target(root: Path, victim: Path) -> None:
    before = snapshot(victim)
    (tree(root) / "model").symlink_to(victim)
    (tree(root) / ".staging").symlink_to(victim)
    (tree(root) / f".deleting-{os.getpid()}").symlink_to(victim)
    code, result = preload("--delete", KEY, root=root)
    assert code == 0 and result["reason"] == "Deleted", result
    assert snapshot(victim) == before
    assert not os.path.lexists(tree(root) / "model")
