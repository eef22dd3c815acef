"""The part journal is flushed by bytes as well as by time: on a fast link a kill must find parts recorded."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from warmstart.preload import partjournal
from warmstart.preload.sources import RemoteFile
from warmstart.preload.sources.s3ranges import Durable, Job

PART = 1 << 20
CRC = "0000abcd"


def _job(tmp_path: Path) -> Job:
    file = RemoteFile(path="model.safetensors", size=8 * PART, ref="model/model.safetensors", etag="e")
    header = partjournal.Header(file.fingerprint(), 2 * PART, ("CRC32",))
    journal = partjournal.PartJournal(str(tmp_path / "journal.jsonl"), header)
    job = Job(file, str(tmp_path / "part"), journal, fd=os.open(tmp_path / "part", os.O_RDWR | os.O_CREAT))
    journal.start({}, {})
    return job


def _recorded_when(job: Job, arrived: threading.Event) -> bool:
    """Wait (at most 30 s, far below the hour-long interval) for the journal to record a part."""
    for _ in range(300):
        if job.journal.load():
            return True
        arrived.wait(0.1)
    return False


def test_a_flush_starts_once_enough_bytes_arrived_without_waiting_for_the_interval(tmp_path: Path) -> None:
    job = _job(tmp_path)
    never = threading.Event()
    try:
        with Durable(interval=3600, flush_bytes=2 * PART) as durable:
            durable.arriving(job, 1, PART // 2, CRC)
            durable.add(job, 0, {"CRC32": "00000000"})  # a whole part, not yet journaled
            assert not durable.due.is_set()  # half a part arrived: below the threshold, no flush is due
            assert not job.journal.load()
            durable.arriving(job, 1, PART - 1, CRC)
            durable.arriving(job, 2, PART + 2, CRC)  # 2 MiB and a byte arrived since the last flush: due now
            assert _recorded_when(job, never)
            assert job.journal.load() == {0: {"CRC32": "00000000"}}
            assert job.journal.load_prefixes() == {1: (PART - 1, CRC), 2: (PART + 2, CRC)}
    finally:
        os.close(job.fd)


def test_a_resumed_prefix_does_not_count_as_arrived(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job.prefixes = {1: PART - 1}  # kept from an earlier run: on disk already
    try:
        with Durable(interval=3600, flush_bytes=PART) as durable:
            durable.arriving(job, 1, PART - 1 + 10, CRC)  # only 10 new bytes
            assert not durable.due.is_set()
            durable.arriving(job, 2, PART, CRC)
            assert durable.due.wait(30)
    finally:
        os.close(job.fd)
