"""Parts are journaled as they are written, not after an fdatasync: a kill -9 finds every written read recorded.

The download threads' path (`s3ranges._part`) runs on a real part file and journal, with a body that stops after
each read to look at the journal; the background writeback is set never to fall due, so whatever the journal holds
was written without waiting for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from warmstart.preload import partdigests, partjournal
from warmstart.preload.sources import RemoteFile, s3ranges
from warmstart.preload.sources.s3ranges import Job, Writeback

MIB = 1 << 20
PART = 4 * MIB
NEVER = 1 << 62


class Body:
    """A GET body of `data` read 1 MiB at a time, calling `after_read` with the bytes read so far after each read."""

    def __init__(self, data: bytes, after_read: Callable[[int], None]) -> None:
        self.data, self.after_read, self.offset = data, after_read, 0

    def read(self, n: int) -> bytes:
        if self.offset:
            self.after_read(self.offset)
        chunk = self.data[self.offset : self.offset + min(n, MIB)]
        self.offset += len(chunk)
        return chunk

    def close(self) -> None:
        pass


def _job(tmp_path: Path, size: int) -> Job:
    file = RemoteFile(path="model.safetensors", size=size, ref="model/model.safetensors", etag="e")
    header = partjournal.Header(file.fingerprint(), PART, (partdigests.local_algorithm(),))
    journal = partjournal.PartJournal(str(tmp_path / "journal.jsonl"), header)
    job = Job(file, str(tmp_path / "part"), journal)
    s3ranges.prepare(job)
    return job


def test_each_read_and_each_part_is_journaled_as_soon_as_it_is_written(tmp_path: Path) -> None:
    data = os.urandom(2 * PART)
    job = _job(tmp_path, len(data))
    seen: dict[tuple[int, int], tuple[dict[int, dict[str, str]], dict[int, partjournal.Prefix]]] = {}

    def look(index: int) -> Callable[[int], None]:
        def after_read(read: int) -> None:  # the journal, as a kill -9 right now would leave it
            seen[index, read] = (job.journal.load(), job.journal.load_prefixes())

        return after_read

    try:
        with Writeback(interval=3600, flush_bytes=NEVER) as writeback:
            for index in (0, 1):
                body = data[index * PART : (index + 1) * PART]
                get = lambda f, o, n, b=body, i=index: Body(b, look(i))  # noqa: E731
                digests = s3ranges._part(job, index, get, lambda n: None, writeback)
                assert job.journal.load()[index] == digests  # the whole part, at once
                assert not writeback.due.is_set()  # nothing was flushed meanwhile
    finally:
        job.journal.close()
        os.close(job.fd)
    algorithm = partdigests.local_algorithm()
    fd = os.open(tmp_path / "part", os.O_RDONLY)
    try:
        for read in (MIB, 2 * MIB, 3 * MIB):  # part 1, after each of its first three reads
            parts, prefixes = seen[1, read]
            assert set(parts) == {0}
            assert prefixes[1] == (read, partdigests.of_range(fd, PART, read, algorithm))
        kept = partjournal.recheck(fd, job.journal.load(), len(data), PART, algorithm, partdigests.of_range)
    finally:
        os.close(fd)
    assert sorted(kept) == [0, 1]


def test_the_writeback_falls_due_by_bytes_written_not_by_bytes_kept(tmp_path: Path) -> None:
    job = _job(tmp_path, 2 * PART)
    try:
        with Writeback(interval=3600, flush_bytes=PART) as writeback:
            writeback.wrote(job, PART - 1)
            assert not writeback.due.is_set()
            writeback.wrote(job, 1)
            assert writeback.due.wait(30)  # far below the hour-long interval
    finally:
        job.journal.close()
        os.close(job.fd)
