"""FSx and PVC sources: a nested local tree stands in for the mount, copied in parallel ranges; symlinks kept inside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from preloadhelpers import cache_dir, preload, tree_digests
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload.sources import Options, list_source

MIB = 1 << 20


def fsx_source(location: str) -> str:
    return json.dumps(
        {
            "modelSourceType": "fsx",
            "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0", "mountName": "abcd"},
            "modelLocation": location,
        }
    )


def pvc_source(location: str) -> str:
    return json.dumps(
        {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "models"}, "modelLocation": location}
    )


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    """A mounted volume: models/llama with nested dirs, a 9 MiB shard, small files, an empty one, an inside symlink."""
    m = tmp_path / "mnt"
    model = m / "models" / "llama"
    (model / "tokenizer" / "extra").mkdir(parents=True)
    (model / "model.safetensors").write_bytes(os.urandom(9 * MIB + 5))
    (model / "config.json").write_text("{}")
    (model / "tokenizer" / "tokenizer.json").write_bytes(os.urandom(1000))
    (model / "tokenizer" / "extra" / "empty").write_bytes(b"")
    (m / "shared").mkdir()
    (m / "shared" / "generation_config.json").write_text('{"t": 1}')
    (model / "generation_config.json").symlink_to("../../shared/generation_config.json")
    return m


@pytest.mark.parametrize("make_source", [fsx_source, pvc_source], ids=["fsx", "kubernetesVolume"])
def test_nested_tree_is_copied_whole(mount: Path, root: Path, make_source: object) -> None:
    source = make_source("models/llama")  # type: ignore[operator]
    code, result = preload(
        "--source-json",
        source,
        "--key",
        "local",
        "--mount-root",
        str(mount),
        "--part-size-mb",
        "2",
        "--concurrency",
        "4",
        root=root,
    )

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 5)
    expected = tree_digests(mount / "models" / "llama")
    assert tree_digests(cache_dir(root, "local")) == expected
    assert not (cache_dir(root, "local") / "generation_config.json").is_symlink()  # the cache holds the bytes


def test_list_source_gives_the_size_for_a_capacity_check_and_writes_nothing(mount: Path) -> None:
    config = ModelSourceConfig.model_validate(json.loads(fsx_source("models/llama")))
    listing = list_source(config, Options(mount_root=str(mount)))
    assert listing.total_bytes == sum(p.stat().st_size for p in (mount / "models" / "llama").rglob("*") if p.is_file())
    assert sorted(f.path for f in listing.files) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer/extra/empty",
        "tokenizer/tokenizer.json",
    ]


def test_a_symlink_pointing_outside_the_volume_is_refused(mount: Path, root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("node credentials")
    (mount / "models" / "llama" / "tokenizer" / "leak.json").symlink_to(secret)

    code, result = preload(
        "--source-json", fsx_source("models/llama"), "--key", "leak", "--mount-root", str(mount), root=root
    )

    assert (code, result["reason"]) == (68, "PathEscape")
    assert "tokenizer/leak.json" in result["message"] and "outside the mounted volume" in result["message"]
    assert not cache_dir(root, "leak").exists()


def test_a_symlinked_model_directory_outside_the_volume_is_refused(mount: Path, root: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (mount / "models" / "escape").symlink_to(tmp_path / "elsewhere")
    code, result = preload(
        "--source-json", pvc_source("models/escape"), "--key", "esc", "--mount-root", str(mount), root=root
    )
    assert (code, result["reason"]) == (68, "PathEscape")


def test_a_symlink_cycle_inside_the_volume_is_walked_once(mount: Path, root: Path) -> None:
    (mount / "models" / "llama" / "tokenizer" / "loop").symlink_to("..")
    code, result = preload(
        "--source-json", fsx_source("models/llama"), "--key", "loop", "--mount-root", str(mount), root=root
    )
    assert code == 0 and result["files"] == 5


def test_missing_location_and_empty_directory_are_not_found(mount: Path, root: Path) -> None:
    code, result = preload(
        "--source-json", fsx_source("models/nope"), "--key", "nope", "--mount-root", str(mount), root=root
    )
    assert (code, result["reason"]) == (66, "NotFound") and "models/nope does not exist" in result["message"]
    (mount / "models" / "empty").mkdir()
    code, result = preload(
        "--source-json", fsx_source("models/empty"), "--key", "nope", "--mount-root", str(mount), root=root
    )
    assert (code, result["reason"]) == (66, "NotFound") and "holds no files" in result["message"]


def test_dotdot_location_is_refused(mount: Path, root: Path) -> None:
    code, result = preload(
        "--source-json", pvc_source("models/../../etc"), "--key", "dd", "--mount-root", str(mount), root=root
    )
    assert (code, result["reason"]) == (68, "PathEscape")
