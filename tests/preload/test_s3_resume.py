"""kill -9 in the middle of a download, then a rerun: verified files are kept, partial ones fetched again, and
the published cache is whole. Also: a staged file damaged between runs, and two preloads of one key at once."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from preloadhelpers import cache_dir, digests, preload, preload_process, put, s3_source, tree_digests
from warmstart.preload import store

MIB = 1 << 20


def upload_model(s3: Any, bucket: str, count: int = 12, size: int = 12 * MIB) -> dict[str, bytes]:
    files = {f"shard-{i:02d}.safetensors": os.urandom(size) for i in range(count)}
    for name, data in files.items():
        put(s3, bucket, f"m/{name}", data, part_size=5 * MIB)
    return files


def journal_lines(root: Path, key: str) -> int:
    try:
        return len((root / "warmstart" / "keys" / key / ".staging" / store.JOURNAL_NAME).read_text().splitlines())
    except FileNotFoundError:
        return 0


def kill_after_some_files(proc: Any, root: Path, key: str, files: int) -> None:
    deadline = time.monotonic() + 120
    while journal_lines(root, key) < files:
        assert proc.poll() is None, "the preload ended before it could be killed; give it more data"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    children = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, "download workers outlived the preload"


@pytest.mark.parametrize("processes", ["1", "2"])
def test_sigkill_mid_download_then_rerun_resumes_and_completes(
    s3: Any, bucket: str, root: Path, env: dict[str, str], tmp_path: Path, processes: str
) -> None:
    files = upload_model(s3, bucket)
    args = [
        "--source-json",
        s3_source(bucket, "m"),
        "--key",
        "resume",
        "--concurrency",
        processes,
        "--part-size-mb",
        "1",
        "--processes",
        processes,
    ]
    proc = preload_process(*args, root=root, env=env, tlog=tmp_path / "tlog1")
    kill_after_some_files(proc, root, "resume", 2)

    assert proc.returncode == -signal.SIGKILL
    assert not cache_dir(root, "resume").exists()  # nothing partial looks complete
    kept = journal_lines(root, "resume")
    assert 2 <= kept < len(files)
    code, result = preload(*args, "--if-missing", root=root)

    assert (code, result["reason"]) == (0, "Downloaded")
    assert f"{kept} kept from an interrupted run" in result["message"]
    size = len(next(iter(files.values())))  # every file has the same size
    assert kept * size <= result["kept"] < len(files) * size  # the whole files kept, plus any part prefixes
    assert tree_digests(cache_dir(root, "resume")) == digests(files)
    assert not (root / "warmstart" / "keys" / "resume" / ".staging").exists()


def test_a_staged_file_damaged_between_runs_is_fetched_again(
    s3: Any, bucket: str, root: Path, env: dict[str, str], tmp_path: Path
) -> None:
    files = upload_model(s3, bucket)
    args = ["--source-json", s3_source(bucket, "m"), "--key", "damaged", "--concurrency", "1", "--part-size-mb", "1"]
    proc = preload_process(*args, root=root, env=env, tlog=tmp_path / "tlog1")
    kill_after_some_files(proc, root, "damaged", 2)
    staging = root / "warmstart" / "keys" / "damaged" / ".staging"
    victim = next(p for p in sorted(staging.glob("*.safetensors")))
    with open(victim, "r+b") as f:  # same size, one byte different: only a checksum notices
        f.seek(1234)
        byte = f.read(1)
        f.seek(1234)
        f.write(bytes([byte[0] ^ 0x55]))

    kept = journal_lines(root, "damaged")

    code, result = preload(*args, root=root)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    # re-checked while the rest downloaded, found damaged, fetched again: every other whole file stays kept
    assert f"{kept - 1} kept from an interrupted run" in result["message"], result
    assert "(1 failed their re-check and were fetched again)" in result["message"], result
    assert tree_digests(cache_dir(root, "damaged")) == digests(files)


def test_two_preloads_of_one_key_do_not_corrupt_each_other(
    s3: Any, bucket: str, root: Path, env: dict[str, str], tmp_path: Path
) -> None:
    files = upload_model(s3, bucket, count=6, size=8 * MIB)
    args = ["--source-json", s3_source(bucket, "m"), "--key", "twice", "--if-missing", "--concurrency", "2"]
    first = preload_process(*args, root=root, env=env, tlog=tmp_path / "tlog1")
    second = preload_process(*args, root=root, env=env, tlog=tmp_path / "tlog2")
    assert first.wait(120) == 0 and second.wait(120) == 0

    reasons = sorted(json.loads((tmp_path / name).read_text())["reason"] for name in ("tlog1", "tlog2"))
    assert reasons == ["AlreadyPresent", "Downloaded"]  # the second waited for the lock, then found the cache
    assert tree_digests(cache_dir(root, "twice")) == digests(files)
