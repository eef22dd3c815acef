"""A resume schedules the missing ranges as a clean run does: whole parts while much remains, then smaller pieces,
so that every connection stays busy to the end; the kept files and spans are not fetched again.

A model of three multipart shards on moto; the first run is frozen by a proxy after a few GETs and killed -9 there.
The resume goes through a proxy that records each GET's Range. No timing is asserted: the order of the requests and
their sizes are.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, digests, preload, preload_process, put, s3_source, tree_digests
from preloadservers import CorruptingProxy, MotoServer
from warmstart.preload.sources import s3pieces

MIB = 1 << 20
PART = 8 * MIB  # the upload part size, and the largest piece
SHARDS, PARTS = 3, 4
CONCURRENCY = 4


@pytest.fixture
def model(s3: Any, bucket: str) -> dict[str, bytes]:
    files = {f"model-{i + 1:05d}-of-00003.safetensors": os.urandom(PARTS * PART) for i in range(SHARDS)}
    files["config.json"] = b'{"architectures": ["LlamaForCausalLM"]}'
    for name, data in files.items():
        put(s3, bucket, f"m/{name}", data, part_size=PART if len(data) > PART else None)
    return files


def lengths(ranges: list[tuple[str, str]]) -> list[int]:
    """The byte counts of the ranged GETs of the shards, in the order they arrived."""
    out = []
    for path, header in ranges:
        if path.endswith(".safetensors") and header.startswith("bytes="):
            first, last = header.removeprefix("bytes=").split("-")
            out.append(int(last) - int(first) + 1)
    return out


def test_a_resume_fetches_its_tail_in_smaller_pieces(
    model: dict[str, bytes],
    bucket: str,
    root: Path,
    env: dict[str, str],
    moto: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["--source-json", s3_source(bucket, "m"), "--key", "t"]
    args += ["--concurrency", str(CONCURRENCY), "--part-size-mb", str(PART // MIB)]
    answered = 3  # then the proxy holds every GET: the kill lands with most of the model missing
    freezer = CorruptingProxy(moto.url, set(), hold_after=answered, partial_bytes=3 * MIB)
    proc = preload_process(*args, root=root, env={**env, "AWS_ENDPOINT_URL_S3": freezer.url}, tlog=tmp_path / "t1")
    try:
        deadline = time.monotonic() + 120
        while freezer.object_gets < answered + CONCURRENCY:  # every connection busy, the held ones included
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, freezer.object_gets
            time.sleep(0.01)
        time.sleep(0.5)  # the partial GET's first bytes are written and journaled
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        freezer.stop()
    assert not cache_dir(root, "t").exists()

    recorder = CorruptingProxy(moto.url, set())
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", recorder.url)
    try:
        code, result = preload(*args, root=root)
    finally:
        recorder.stop()

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert result["kept"] >= answered * PART  # the parts the first run finished are kept
    sizes = lengths(recorder.ranges)
    assert max(sizes) <= PART
    assert sizes[0] == PART or sizes[0] == PART - 3 * MIB  # whole parts (or a kept span's rest) while much remains
    assert all(n < PART for n in sizes[-(CONCURRENCY - 1) :]), sizes  # the tail: pieces smaller than a part
    assert min(sizes) < PART // 2, sizes
    assert sum(sizes) <= SHARDS * PARTS * PART - result["kept"] + 1  # nothing kept is fetched again (+ config.json)
    assert tree_digests(cache_dir(root, "t")) == digests(model)


def test_pieces_shrink_near_the_end_and_cover_every_byte_once() -> None:
    """The schedule on its own: whole pieces while much remains, smaller ones at the end, never below the minimum
    (but for a gap's own remainder), never across a part, every missing byte handed out exactly once."""
    part, concurrency = 16 * MIB, 4
    missing = [s3pieces.Gap(0, i, 0, part, part) for i in range(10)]  # a fresh file: whole parts
    missing += s3pieces.gaps(1, 0, part, [(0, 3 * MIB), (5 * MIB, 2 * MIB)], part)  # a resumed part: its gaps only
    schedule = s3pieces.Schedule(missing, concurrency)
    pieces = []
    while (piece := schedule.take()) is not None:
        pieces.append(piece)

    assert [p.length for p in pieces[:4]] == [part] * 4
    assert all(n < part for n in [p.length for p in pieces if p.job == 0][-4:])
    assert all(p.length >= s3pieces.MIN_PIECE for p in pieces if p.job == 0)
    covered: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p in pieces:
        spans = covered.setdefault((p.job, p.part), [])
        if spans and spans[-1][1] == p.start:
            spans[-1] = (spans[-1][0], p.start + p.length)  # contiguous: merged
        else:
            spans.append((p.start, p.start + p.length))
    assert covered == {**{(0, i): [(0, part)] for i in range(10)}, (1, 0): [(3 * MIB, 5 * MIB), (7 * MIB, part)]}
    assert schedule.left == 0
