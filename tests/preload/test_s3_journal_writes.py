"""Pieces are journaled as they are written, not after an fdatasync: a kill -9 finds every written read recorded,
so it loses at most one read (`s3bodies.CHUNK`, 1 MiB) per connection.

The download threads' path (`s3ranges._piece`, then `_part_done`) runs on a real part file and journal, with a body
that stops after each read to look at the journal; the background writeback is set never to fall due, so whatever
the journal holds was written without waiting for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from warmstart.preload import partdigests, partjournal
from warmstart.preload.sources import RemoteFile, s3pieces, s3ranges
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
    seen: dict[tuple[int, int], tuple[dict[int, dict[str, str]], dict[int, list[partjournal.Span]]]] = {}

    def look(index: int) -> Callable[[int], None]:
        def after_read(read: int) -> None:  # the journal, as a kill -9 right now would leave it
            seen[index, read] = (job.journal.load(), job.journal.load_spans())

        return after_read

    try:
        with Writeback(interval=3600, flush_bytes=NEVER) as writeback:
            for index in (0, 1):
                body = data[index * PART : (index + 1) * PART]
                get = lambda f, o, n, b=body, i=index: Body(b, look(i))  # noqa: E731
                piece = s3pieces.Piece(0, index, 0, PART)
                digests = s3ranges._piece(job, piece, get, writeback)
                s3ranges._part_done(job, index, [(0, PART, digests)], threading.Lock(), lambda f, d: None)
                assert job.journal.load()[index] == digests  # the whole part, at once
                assert not writeback.due.is_set()  # nothing was flushed meanwhile
    finally:
        job.journal.close()
        os.close(job.fd)
    algorithm = partdigests.local_algorithm()
    fd = os.open(tmp_path / "part", os.O_RDONLY)
    try:
        for read in (MIB, 2 * MIB, 3 * MIB):  # part 1, after each of its first three reads
            parts, spans = seen[1, read]
            assert set(parts) == {0}
            assert spans[1] == [(0, read, partdigests.of_range(fd, PART, read, algorithm))]
        kept = partjournal.recheck(fd, job.journal.load(), len(data), PART, algorithm, partdigests.of_range)
    finally:
        os.close(fd)
    assert sorted(kept) == [0, 1]


def test_a_piece_inside_a_part_is_journaled_at_its_offset_and_the_part_combines(tmp_path: Path) -> None:
    """A part fetched in two pieces: each read of the second is recorded at its offset in the part, and the part's
    digest, combined from the pieces', is the digest of its bytes."""
    data = os.urandom(PART)
    job = _job(tmp_path, len(data))
    half = PART // 2
    seen: list[dict[int, list[partjournal.Span]]] = []
    try:
        with Writeback(interval=3600, flush_bytes=NEVER) as writeback:
            pieces = []
            for start in (half, 0):
                body = data[start : start + half]
                get = lambda f, o, n, b=body: Body(b, lambda read: seen.append(job.journal.load_spans()))  # noqa: E731
                pieces.append((start, half, s3ranges._piece(job, s3pieces.Piece(0, 0, start, half), get, writeback)))
            digests = s3ranges.part_digests(job, 0, pieces)
    finally:
        job.journal.close()
        os.close(job.fd)
    algorithm = partdigests.local_algorithm()
    fd = os.open(tmp_path / "part", os.O_RDONLY)
    try:
        assert seen[0][0] == [(half, MIB, partdigests.of_range(fd, half, MIB, algorithm))]
        assert digests[algorithm] == partdigests.of_range(fd, 0, PART, algorithm)
    finally:
        os.close(fd)


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
