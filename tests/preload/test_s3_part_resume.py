"""Resume inside a file: the parts a killed preload made durable are re-checked from disk and not fetched again;
a damaged part is fetched again; a journal that lies about parts never publishes a wrong file.

The store is moto behind a proxy that counts the bytes of every object GET and, for the first run, stops answering
after a given number of GETs, so the preload is killed -9 at a known point (no timing involved)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, digests, preload, preload_process, put, s3_source, tree_digests
from preloadservers import CorruptingProxy, MotoServer
from warmstart.preload import partdigests, partjournal

MIB = 1 << 20
PART = 5 * MIB  # the upload part size: the download of these objects goes part by part at it
PARTS = 10
KEEP = 4  # GETs answered before the first run freezes


@pytest.fixture
def model(s3: Any, bucket: str) -> dict[str, bytes]:
    files = {"weights.bin": os.urandom(PARTS * PART), "config.json": b'{"a": 1}'}
    for name, data in files.items():
        put(s3, bucket, f"m/{name}", data, part_size=PART if len(data) > PART else None)
    return files


def staging(root: Path, key: str) -> Path:
    return root / "warmstart" / "keys" / key / ".staging"


def journal_path(root: Path, key: str) -> Path:
    name = hashlib.sha256(b"weights.bin").hexdigest()[:32] + ".jsonl"  # one journal per file, named by its path
    return staging(root, key) / ".warmstart-tmp" / "source" / "parts" / name


def recorded(root: Path, key: str) -> list[dict[str, Any]]:
    try:
        lines = journal_path(root, key).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines[1:]]


def whole_parts(root: Path, key: str) -> list[int]:
    """The parts recorded whole (the other lines are prefixes of parts still arriving)."""
    return sorted(r["i"] for r in recorded(root, key) if "d" in r)


@pytest.fixture
def killed(
    model: dict[str, bytes], bucket: str, root: Path, env: dict[str, str], moto: MotoServer, tmp_path: Path
) -> Iterator[list[str]]:
    """A preload of key "p" killed -9 once KEEP parts of weights.bin are durable; yields its arguments."""
    proxy = CorruptingProxy(moto.url, set(), hold_after=KEEP)
    args = ["--source-json", s3_source(bucket, "m"), "--key", "p", "--concurrency", "1", "--part-size-mb", "5"]
    proc = preload_process(*args, root=root, env={**env, "AWS_ENDPOINT_URL_S3": proxy.url}, tlog=tmp_path / "t1")
    try:
        deadline = time.monotonic() + 120
        while len(whole_parts(root, "p")) < KEEP:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proxy.stop()
    assert not cache_dir(root, "p").exists()  # nothing partial is ever published
    assert whole_parts(root, "p") == list(range(KEEP))
    yield args


def rerun(
    args: list[str], root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, dict[str, Any], int]:
    """The preload again, through a counting proxy: exit code, result, and the bytes of weights.bin served."""
    proxy = CorruptingProxy(moto.url, set())
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    try:
        code, result = preload(*args, root=root)
    finally:
        proxy.stop()
    served = sum(n for path, n in proxy.served.items() if path.endswith("/m/weights.bin"))
    return code, result, served


def test_the_parts_a_killed_run_made_durable_are_not_fetched_again(
    killed: list[str], model: dict[str, bytes], root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, result, served = rerun(killed, root, moto, monkeypatch)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert served == (PARTS - KEEP) * PART
    assert tree_digests(cache_dir(root, "p")) == digests(model)
    assert not staging(root, "p").exists()


def test_a_part_damaged_between_runs_is_fetched_again(
    killed: list[str], model: dict[str, bytes], root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    part_file = staging(root, "p") / "weights.bin.warmstart-part"
    with open(part_file, "r+b") as f:  # one byte of part 2 flips: same size, only its digest tells
        f.seek(2 * PART + 777)
        byte = f.read(1)
        f.seek(2 * PART + 777)
        f.write(bytes([byte[0] ^ 0x5A]))

    code, result, served = rerun(killed, root, moto, monkeypatch)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert served == (PARTS - KEEP + 1) * PART
    assert tree_digests(cache_dir(root, "p")) == digests(model)


def test_a_journal_claiming_parts_never_fetched_does_not_publish_a_wrong_file(
    killed: list[str], model: dict[str, bytes], root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = journal_path(root, "p")
    header = json.loads(path.read_text().splitlines()[0])
    fd = os.open(staging(root, "p") / "weights.bin.warmstart-part", os.O_RDONLY)
    try:  # records for the parts never written, with the digests of the zeros on disk: they pass the re-check
        lies = [
            {"i": i, "d": {a: partdigests.of_range(fd, i * PART, PART, a) for a in header["algorithms"]}}
            for i in range(KEEP, PARTS)
        ]
    finally:
        os.close(fd)
    with open(path, "a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lies))

    code, result, served = rerun(killed, root, moto, monkeypatch)

    assert (code, result["reason"]) == (65, "ChecksumMismatch"), result
    assert served == 0
    assert not cache_dir(root, "p").exists()
    code, result, served = rerun(killed, root, moto, monkeypatch)  # the bad file was dropped: fetched whole
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert served == PARTS * PART
    assert tree_digests(cache_dir(root, "p")) == digests(model)


def test_a_journal_claiming_a_prefix_never_fetched_does_not_publish_a_wrong_file(
    killed: list[str], model: dict[str, bytes], root: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = journal_path(root, "p")
    header = json.loads(path.read_text().splitlines()[0])
    claimed = 3 * MIB
    fd = os.open(staging(root, "p") / "weights.bin.warmstart-part", os.O_RDONLY)
    try:  # a prefix of a part never written, with the digest of the zeros on disk: it passes the re-check
        lie = {"i": KEEP, "n": claimed, "p": partdigests.of_range(fd, KEEP * PART, claimed, header["algorithms"][0])}
    finally:
        os.close(fd)
    with open(path, "a") as f:
        f.write(json.dumps(lie) + "\n")

    code, result, served = rerun(killed, root, moto, monkeypatch)

    assert (code, result["reason"]) == (65, "ChecksumMismatch"), result
    assert served == (PARTS - KEEP) * PART - claimed
    assert not cache_dir(root, "p").exists()
    code, result, served = rerun(killed, root, moto, monkeypatch)  # the bad file was dropped: fetched whole
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert tree_digests(cache_dir(root, "p")) == digests(model)


def test_a_torn_last_line_and_a_journal_of_another_version_are_ignored() -> None:
    header = partjournal.Header({"size": 3 * PART, "etag": "x-3"}, PART, ("CRC64NVME",))
    lines = [json.dumps(header.to_json()), '{"i": 0, "d": {"CRC64NVME": "ab"}}', '{"i": 1, "d": {"CRC6']
    assert partjournal.parse(lines, header) == {0: {"CRC64NVME": "ab"}}
    other = partjournal.Header({"size": 3 * PART, "etag": "y-3"}, PART, ("CRC64NVME",))
    assert partjournal.parse(lines, other) == {}
    out_of_range = [*lines[:1], '{"i": 3, "d": {"CRC64NVME": "ab"}}', '{"i": 0, "d": {"MD5": "ab"}}']
    assert partjournal.parse(out_of_range, header) == {}


def test_a_part_killed_mid_way_resumes_from_its_durable_prefix(
    model: dict[str, bytes],
    bucket: str,
    root: Path,
    env: dict[str, str],
    moto: MotoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kill mid-part keeps the part's first bytes that were made durable: the resume fetches only the rest."""
    partial = 3 * MIB  # a multiple of the 1 MiB reads (a read waits for its whole buffer)
    proxy = CorruptingProxy(moto.url, set(), hold_after=KEEP, partial_bytes=partial)
    args = ["--source-json", s3_source(bucket, "m"), "--key", "p", "--concurrency", "1", "--part-size-mb", "5"]
    proc = preload_process(*args, root=root, env={**env, "AWS_ENDPOINT_URL_S3": proxy.url}, tlog=tmp_path / "t1")
    try:
        deadline = time.monotonic() + 120
        while not any(r.get("i") == KEEP and r.get("n") == partial for r in recorded(root, "p")):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, recorded(root, "p")
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proxy.stop()

    code, result, served = rerun(args, root, moto, monkeypatch)

    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert served == (PARTS - KEEP) * PART - partial
    assert tree_digests(cache_dir(root, "p")) == digests(model)


def test_span_records_are_parsed_strictly_and_a_damaged_span_is_dropped(tmp_path: Path) -> None:
    header = partjournal.Header({"size": 3 * PART, "etag": "x-3"}, PART, ("CRC64NVME",))
    lines = [
        json.dumps(header.to_json()),
        '{"i": 1, "n": 1000, "p": "aa"}',
        '{"i": 1, "n": 2000, "p": "bb"}',  # the longest span at an offset wins
        '{"i": 1, "o": 1500, "n": 100, "p": "ee"}',  # overlaps the span before it: dropped
        '{"i": 1, "o": 3000, "n": 100, "p": "ff"}',  # a span further into the part
        f'{{"i": 1, "o": {PART - 10}, "n": 11, "p": "gg"}}',  # past the part's end
        f'{{"i": 2, "n": {PART}, "p": "cc"}}',  # a span may be the whole part
        '{"i": 0, "n": 0, "p": "dd"}',
        '{"i": 0, "n": 10, "p": 7}',
        '{"i": 0, "o": -1, "n": 10, "p": "hh"}',
        '{"i": 0, "n": 1',
    ]
    assert partjournal.parse_spans(lines, header) == {1: [(0, 2000, "bb"), (3000, 100, "ff")], 2: [(0, PART, "cc")]}
    assert partjournal.parse(lines, header) == {}

    path = tmp_path / "part"
    path.write_bytes(os.urandom(3 * PART))
    fd = os.open(path, os.O_RDWR)
    try:
        good = partdigests.of_range(fd, PART, 4096, "CRC64NVME")
        inside = partdigests.of_range(fd, PART + 8192, 4096, "CRC64NVME")
        recorded = {
            1: [(0, 4096, good), (8192, 4096, inside)],
            2: [(0, 4096, partdigests.of_range(fd, 2 * PART, 4096, "CRC64NVME"))],
        }
        os.pwrite(fd, b"\x00" * 8, 2 * PART + 100)  # part 2's span is damaged after it was recorded
        kept = partjournal.recheck_spans(fd, recorded, 3 * PART, PART, "CRC64NVME", partdigests.of_range)
    finally:
        os.close(fd)
    assert kept == {1: [(0, 4096, good), (8192, 4096, inside)]}
