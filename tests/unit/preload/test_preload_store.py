"""The cache store without any source: keys, paths, capacity arithmetic, manifests, publish and delete."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from warmstart.api.preloading import Reason
from warmstart.preload import store
from warmstart.preload.results import PreloadError

GB = 1_000_000_000


@pytest.mark.parametrize("key", ["a", "llama-3-8b-0123abcd", "0" * 63])
def test_good_keys(key: str) -> None:
    assert store.validate_key(key) == key


@pytest.mark.parametrize("key", ["", "-a", "A", "a_b", "a/b", "..", "a" * 64, ".staging-a"])
def test_bad_keys(key: str) -> None:
    with pytest.raises(PreloadError) as info:
        store.validate_key(key)
    assert info.value.reason == Reason.INVALID_SOURCE


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "../x",
        "a/../../x",
        "a//b",
        "./a",
        "a/.",
        ".warmstart-manifest.json",
        "x.warmstart-part",
        "a\0b",
    ],
)
def test_paths_that_could_escape_or_collide_are_refused(path: str) -> None:
    with pytest.raises(PreloadError) as info:
        store.safe_relpath(path)
    assert info.value.reason == Reason.PATH_ESCAPE


def test_ordinary_paths_pass() -> None:
    assert store.safe_relpath("tokenizer/tokenizer.json") == "tokenizer/tokenizer.json"
    assert store.safe_relpath("..hidden-but-fine") == "..hidden-but-fine"


def fake_statvfs(free: int) -> Any:
    return lambda path: SimpleNamespace(f_bavail=free, f_frsize=1)


def test_a_300_gb_model_does_not_fit_a_250_gb_nvme() -> None:
    with pytest.raises(PreloadError) as info:
        store.check_capacity(300 * GB, "/nvme", fake_statvfs(250 * GB))
    assert info.value.reason == Reason.INSUFFICIENT_CAPACITY
    assert "300000000000 bytes" in info.value.message and "250000000000 bytes are available" in info.value.message


def test_the_margin_is_5_percent_or_1_gb() -> None:
    assert store.margin(10 * GB) == 1 * GB
    assert store.margin(100 * GB) == 5 * GB
    assert store.check_capacity(100 * GB, "/nvme", fake_statvfs(105 * GB)).fits
    with pytest.raises(PreloadError):
        store.check_capacity(100 * GB, "/nvme", fake_statvfs(105 * GB - 1))
    with pytest.raises(PreloadError):
        store.check_capacity(1, "/nvme", fake_statvfs(GB))


def publish(root: Path, key: str, files: dict[str, bytes]) -> store.Layout:
    lay = store.layout(str(root), key)
    staging = store.Staging(lay)
    for rel, data in files.items():
        os.makedirs(os.path.dirname(staging.part_path(rel)), exist_ok=True)
        Path(staging.part_path(rel)).write_bytes(data)
        staging.commit_file(rel, {"size": len(data)})
    entries = [{"path": rel, "size": len(data)} for rel, data in files.items()]
    staging.publish(store.build_manifest(lay, {"type": "test"}, entries, {}))
    return lay


def test_publish_renames_staging_into_place_with_the_manifest(tmp_path: Path) -> None:
    lay = publish(tmp_path, "k", {"a/b.bin": b"12345", "c.txt": b""})
    manifest = store.read_manifest(lay)
    assert manifest is not None and manifest.total_bytes == 5 and manifest.key == "k"
    assert sorted(os.listdir(lay.final)) == [store.MANIFEST_NAME, "a", "c.txt"]
    assert not os.path.exists(lay.staging)


@pytest.mark.parametrize("damage", ["truncate-file", "remove-file", "bad-json", "other-key", "no-manifest"])
def test_an_incomplete_cache_has_no_valid_manifest(tmp_path: Path, damage: str) -> None:
    lay = publish(tmp_path, "k", {"a.bin": b"12345"})
    manifest_path = Path(lay.manifest_path)
    if damage == "truncate-file":
        (Path(lay.final) / "a.bin").write_bytes(b"12")
    elif damage == "remove-file":
        (Path(lay.final) / "a.bin").unlink()
    elif damage == "bad-json":
        manifest_path.write_text("{")
    elif damage == "other-key":
        manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "key": "other"}))
    else:
        manifest_path.unlink()
    assert store.read_manifest(lay) is None


def test_staging_journal_survives_a_torn_last_line(tmp_path: Path) -> None:
    lay = store.layout(str(tmp_path), "k")
    staging = store.Staging(lay)
    Path(staging.part_path("a.bin")).write_bytes(b"abc")
    staging.commit_file("a.bin", {"size": 3, "etag": "e"})
    with open(os.path.join(lay.staging, store.JOURNAL_NAME), "a") as f:
        f.write('{"path": "b.bin", "fingerp')  # killed mid-write
    again = store.Staging(lay)
    assert again.journaled("a.bin", {"size": 3, "etag": "e"})
    assert not again.journaled("a.bin", {"size": 3, "etag": "other"})  # another version of the object
    assert not again.journaled("b.bin", {"size": 1})


def test_delete_removes_a_symlinked_copy_without_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = tmp_path / "root"
    tree = root / "warmstart" / "keys" / "k"
    tree.mkdir(parents=True)
    (tree / "model").symlink_to(outside)
    assert store.delete(str(root), "k") is True
    assert not (tree / "model").exists() and (outside / "keep.txt").read_text() == "keep"


def test_delete_refuses_a_key_tree_that_resolves_outside_root(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "keys" / "k").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    (root / "warmstart").symlink_to(elsewhere)
    with pytest.raises(PreloadError) as info:
        store.delete(str(root), "k")
    assert info.value.reason == Reason.PATH_ESCAPE
    assert (elsewhere / "keys" / "k").is_dir()


def test_delete_validates_the_key(tmp_path: Path) -> None:
    with pytest.raises(PreloadError):
        store.delete(str(tmp_path), "../etc")


def test_a_copy_of_the_earlier_layout_moves_into_its_keys_tree_instead_of_being_downloaded_again(
    tmp_path: Path,
) -> None:
    legacy = tmp_path / "root" / "warmstart" / "weights" / "k"
    legacy.mkdir(parents=True)
    (legacy / "config.json").write_text("{}")
    lay = store.layout(str(tmp_path / "root"), "k")
    store.ensure_key_dir(lay)
    assert (Path(lay.final) / "config.json").read_text() == "{}"
    assert not legacy.exists()
    store.ensure_key_dir(lay)  # once moved, nothing more happens
    assert (Path(lay.final) / "config.json").read_text() == "{}"
