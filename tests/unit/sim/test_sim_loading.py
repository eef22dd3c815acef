"""The simulator reads its model directory before it serves, and refuses an incomplete cache."""

from __future__ import annotations

import json
import pathlib

import pytest

from warmstart.sim import loading


def write_model(directory: pathlib.Path, files: dict[str, bytes], manifest: bool = True) -> None:
    for relative, data in files.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_bytes(data)
    if manifest:
        entries = [{"path": relative, "size": len(data)} for relative, data in files.items()]
        (directory / loading.MANIFEST_NAME).write_text(json.dumps({"formatVersion": 1, "files": entries}))


def test_load_reads_every_byte_the_manifest_lists(tmp_path: pathlib.Path) -> None:
    write_model(tmp_path, {"config.json": b"{}", "shards/model-00001.safetensors": b"x" * 3_000_000})
    report = loading.load(tmp_path)
    assert (report.files, report.bytes, report.manifest) == (2, 3_000_002, True)


def test_load_without_manifest_reads_what_is_there(tmp_path: pathlib.Path) -> None:
    write_model(tmp_path, {"weights.bin": b"abc"}, manifest=False)
    assert loading.load(tmp_path).bytes == 3


def test_a_file_shorter_than_the_manifest_says_fails_the_start(tmp_path: pathlib.Path) -> None:
    write_model(tmp_path, {"weights.bin": b"abcdef"})
    (tmp_path / "weights.bin").write_bytes(b"abc")
    with pytest.raises(loading.WeightsError, match=r"weights\.bin: expected 6 bytes, found 3 bytes"):
        loading.load(tmp_path)


def test_a_missing_file_fails_the_start(tmp_path: pathlib.Path) -> None:
    write_model(tmp_path, {"a.bin": b"a", "b.bin": b"b"})
    (tmp_path / "b.bin").unlink()
    with pytest.raises(loading.WeightsError, match=r"b\.bin: expected 1 bytes, found missing"):
        loading.load(tmp_path)


def test_an_empty_or_absent_directory_fails_the_start(tmp_path: pathlib.Path) -> None:
    with pytest.raises(loading.WeightsError, match="holds no files"):
        loading.load(tmp_path)
    with pytest.raises(loading.WeightsError, match="does not exist"):
        loading.load(tmp_path / "nope")


def test_a_symlink_planted_in_the_model_directory_is_not_read(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"other tenant")
    model = tmp_path / "model"
    write_model(model, {"weights.bin": b"w"}, manifest=False)
    (model / "link.bin").symlink_to(secret)
    assert loading.load(model).files == 1


def test_sim_exits_1_when_its_model_directory_is_incomplete(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "warmstart.cli", "sim", "--base-port", "0", "--model-dir", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "cannot load the model" in done.stderr


async def test_health_is_503_until_the_weights_are_loaded() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from warmstart.sim.server import SimReplica

    replica = SimReplica("r0")
    replica.ready = False
    async with TestClient(TestServer(replica.app)) as client:
        assert (await client.get("/health")).status == 503
        replica.ready = True
        assert (await client.get("/health")).status == 200
