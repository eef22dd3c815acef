"""The node side of the CSI driver on this host's real kernel (root, mount(2)): read-only binds, and no symlink.

What a writer could plant in the cache (`weights/<key> -> /etc`) must never make the driver bind another directory.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from warmstart.csi import mounting

KEY = "0123456789abcdef0123456789abcdef"


def test_a_reader_gets_a_read_only_bind_that_is_gone_after_unpublish(tmp_path: pathlib.Path) -> None:
    source, target = tmp_path / "cache", tmp_path / "pod" / "mount"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"weights")
    mounting.bind(str(source), str(target), read_only=True)
    try:
        assert (target / "model.safetensors").read_bytes() == b"weights"
        with pytest.raises(OSError, match="Read-only file system"):
            (target / "poison").write_bytes(b"x")
        mounting.bind(str(source), str(target), read_only=True)  # a retried publish is a no-op
    finally:
        mounting.unbind(str(target))
    assert not target.exists()
    mounting.unbind(str(target))  # a retried unpublish too


def test_a_symlink_on_the_way_to_a_cache_is_refused(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "nvme"
    (root / "warmstart" / "weights").mkdir(parents=True)
    (root / "warmstart" / "weights" / "k").symlink_to("/etc")
    with pytest.raises(mounting.PathError, match="not a directory") as refused:
        mounting.plain_directory(str(root), str(root / "warmstart" / "weights" / "k"))
    assert not refused.value.missing
    with pytest.raises(mounting.PathError) as missing:
        mounting.plain_directory(str(root), str(root / "warmstart" / "weights" / "absent"))
    assert missing.value.missing


def test_a_bind_through_the_checked_descriptor_mounts_the_checked_directory(tmp_path: pathlib.Path) -> None:
    root, target = tmp_path / "nvme", tmp_path / "pod" / "mount"
    key_dir = root / "warmstart" / "weights" / "k"
    key_dir.mkdir(parents=True)
    (key_dir / "config.json").write_text("{}")
    checked = mounting.open_plain(str(root), str(key_dir))
    try:
        # a writer swaps the directory for a link after the check: the bind still mounts the checked directory
        key_dir.rename(root / "warmstart" / "weights" / "moved")
        key_dir.symlink_to("/etc")
        mounting.bind(f"/proc/self/fd/{checked}", str(target), read_only=True)
    finally:
        os.close(checked)
    try:
        assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    finally:
        mounting.unbind(str(target))
    with pytest.raises(mounting.PathError, match="not a directory"):
        mounting.open_plain(str(root), str(key_dir))


def test_a_writers_key_tree_is_created_for_the_cache_uid_and_the_directories_above_stay_roots(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "nvme"
    root.mkdir()
    tree = root / "team" / "model" / "warmstart" / "keys" / KEY
    mounting.own_key_dir(str(root), str(tree), str(root / "warmstart" / "weights" / KEY), 65532)
    assert os.lstat(tree).st_uid == 65532
    for above in (root / "team", tree.parent, tree.parent.parent):
        assert os.lstat(above).st_uid == 0, above  # no writer owns what holds other keys or the reader marks


def test_a_copy_of_the_earlier_layout_becomes_the_key_trees_model_instead_of_being_downloaded_again(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "nvme"
    legacy = root / "warmstart" / "weights" / KEY
    legacy.mkdir(parents=True)
    (legacy / "config.json").write_text("{}")
    tree = root / "warmstart" / "keys" / KEY
    mounting.own_key_dir(str(root), str(tree), str(legacy), 65532)
    assert (tree / "model" / "config.json").read_text() == "{}"
    assert not legacy.exists()
    assert os.lstat(tree / "model" / "config.json").st_uid == 65532


def test_a_linked_cache_directory_is_refused_not_followed(tmp_path: pathlib.Path) -> None:
    root, elsewhere = tmp_path / "nvme", tmp_path / "etc"
    root.mkdir()
    elsewhere.mkdir()
    (root / "warmstart").symlink_to(elsewhere)
    with pytest.raises(mounting.PathError):
        mounting.own_key_dir(str(root), str(root / "warmstart" / "keys" / KEY), str(root / "x"), 65532)
    assert os.lstat(elsewhere).st_uid == 0
    assert not (elsewhere / "keys").exists()
