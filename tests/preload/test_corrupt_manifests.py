"""A manifest that is valid JSON of the wrong shape is a corrupt cache: downloaded again, never a permanent failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, preload, put, s3_source

WRONG_SHAPES: list[Any] = [
    [],
    "complete",
    42,
    None,
    {"formatVersion": 1},
    {"formatVersion": "1", "key": "k", "completedAt": "x", "totalBytes": 1, "files": []},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 1, "files": "a.bin"},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 1, "files": [["a.bin", 1]]},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 1, "files": [{"path": 7, "size": 1}]},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 1, "files": [{"path": "a.bin", "size": "1"}]},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 9, "files": [{"path": "a.bin", "size": 1}]},
    {"formatVersion": 1, "key": "k", "completedAt": "x", "totalBytes": 1, "files": [{"path": "a.bin", "size": 1}],
     "producer": "team-a"},
]  # fmt: skip


@pytest.mark.parametrize("shape", WRONG_SHAPES, ids=[f"shape{i}" for i in range(len(WRONG_SHAPES))])
def test_a_manifest_of_the_wrong_shape_is_downloaded_again(s3: Any, bucket: str, root: Path, shape: Any) -> None:
    put(s3, bucket, "m/a.bin", b"a")
    final = cache_dir(root, "k")
    final.mkdir(parents=True)
    (final / "a.bin").write_bytes(b"a")
    (final / ".warmstart-manifest.json").write_text(json.dumps(shape))
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "k", "--if-missing", root=root)
    assert code == 0 and result["reason"] == "Downloaded", result
    manifest = json.loads((final / ".warmstart-manifest.json").read_text())
    assert manifest["key"] == "k" and manifest["files"][0]["path"] == "a.bin"
