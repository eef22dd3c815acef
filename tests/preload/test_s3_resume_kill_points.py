"""A preload killed -9 at 10%, 25%, 40%, 50% and 75% of its bytes on disk: the resume keeps every byte on disk but the
read each connection had in progress (at most `s3bodies.CHUNK`, 1 MiB, per connection: well inside the 8 MiB per
connection the preload promises), fetches only the rest, and publishes the complete, verified model.

A model of three multipart shards is served by moto through a proxy that counts the bytes of every object GET. The
first run is killed as soon as the allocated blocks of its staged files reach the kill point: no timing, and no
waiting for its journal to catch up (the journal must already hold what is on disk). So that the kill lands before
the run completes, the proxy stops answering a few parts past the kill point.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, digests, preload, preload_process, put, s3_source, tree_digests
from preloadservers import CorruptingProxy, MotoServer
from warmstart.preload.sources import s3bodies

MIB = 1 << 20
PART = 5 * MIB  # the upload part size, and the download's
SHARDS, PARTS = 3, 8
CONCURRENCY = 4
LOST = s3bodies.CHUNK * CONCURRENCY  # a kill loses at most the read in progress on each connection


@pytest.fixture
def model(s3: Any, bucket: str) -> dict[str, bytes]:
    files = {f"model-{i + 1:05d}-of-00003.safetensors": os.urandom(PARTS * PART) for i in range(SHARDS)}
    files["config.json"] = b'{"architectures": ["LlamaForCausalLM"]}'
    for name, data in files.items():
        put(s3, bucket, f"m/{name}", data, part_size=PART if len(data) > PART else None)
    return files


def staged(root: Path, key: str) -> dict[str, int]:
    """Bytes on disk (allocated blocks) of each file staged so far, by its name in the model."""
    staging = root / "warmstart" / "keys" / key / ".staging"
    sizes = {}
    for path in staging.glob("*"):
        if path.is_file() and not path.name.startswith(".warmstart"):  # not the journal of whole files
            try:
                sizes[path.name.removesuffix(".warmstart-part")] = path.lstat().st_blocks * 512
            except FileNotFoundError:
                pass
    return sizes


@pytest.mark.parametrize("fraction", [0.10, 0.25, 0.40, 0.50, 0.75])
def test_a_resume_fetches_only_what_was_missing_at_the_kill(
    model: dict[str, bytes],
    bucket: str,
    root: Path,
    env: dict[str, str],
    moto: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fraction: float,
) -> None:
    total = sum(map(len, model.values()))
    answered = math.ceil(fraction * total / PART) + 2  # GETs answered before the proxy holds the rest
    args = ["--source-json", s3_source(bucket, "m"), "--key", "k"]
    args += ["--concurrency", str(CONCURRENCY), "--part-size-mb", str(PART // MIB)]
    freezer = CorruptingProxy(moto.url, set(), hold_after=answered, partial_bytes=3 * MIB)
    proc = preload_process(*args, root=root, env={**env, "AWS_ENDPOINT_URL_S3": freezer.url}, tlog=tmp_path / "t1")
    try:
        deadline = time.monotonic() + 300
        while sum(staged(root, "k").values()) < fraction * total:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, staged(root, "k")
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        freezer.stop()
    assert proc.returncode == -signal.SIGKILL
    assert not cache_dir(root, "k").exists()  # the kill landed before completion
    on_disk = staged(root, "k")
    arrived = sum(min(n, len(model[name])) for name, n in on_disk.items())
    missing = total - arrived

    counter = CorruptingProxy(moto.url, set())
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", counter.url)
    try:
        code, result = preload(*args, root=root)
    finally:
        counter.stop()
    fetched = sum(counter.served.values())

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert result["kept"] >= arrived - LOST, (result["kept"], arrived, on_disk)
    assert fetched <= missing + LOST, (fetched, missing, on_disk)
    assert fetched < total and " of the partial files" in result["message"]  # the resume path: partial files kept
    assert tree_digests(cache_dir(root, "k")) == digests(model)
    assert not (root / "warmstart" / "keys" / "k" / ".staging").exists()
