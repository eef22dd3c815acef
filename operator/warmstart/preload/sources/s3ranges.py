"""Parallel ranged GETs of S3 objects into their part files, each piece journaled as it is written, so a resume
skips it.

Every file's missing ranges go through one pool of `concurrency` threads, file by file (largest first), so files
finish early and one after the other; `s3pieces` cuts them into pieces that shrink near the end, so every connection
stays busy to the last byte, in a clean run and a resume alike. A worker GETs its piece (If-Match on the listed ETag),
reads the body into a reused buffer (`s3bodies`), digests each read (hashlib and awscrt release the GIL), `pwrite`s it
at its offset and appends the piece's written span (offset, bytes and CRC) to the file's `partjournal` after every
read of at most 1 MiB; a part whose bytes are all there is journaled with its digests, combined from its pieces' CRCs
(or read back, for an MD5 or SHA, when it came in several pieces). Nothing waits for the disk: a kill -9 keeps the
bytes and the lines alike (the page cache outlives the process), so it loses only the reads in progress, at most
`s3bodies.CHUNK` per connection. `Writeback` makes them durable in the background (an fdatasync per file every half
second, or once 64 MiB were written), which bounds what a power loss takes; the re-check on resume catches that. A
file whose parts are all there is handed to `on_done` with its parts' digests. On start, every file's recorded parts
and spans are re-checked from disk (the files in parallel) and kept; only the gaps between them are fetched.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import botocore.exceptions

from warmstart.api.preloading import Reason
from warmstart.preload import nofollow, partdigests, partjournal
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import OnBytes, RemoteFile, s3bodies, s3pieces

log = logging.getLogger(__name__)

ATTEMPTS = 5  # per piece, for a body cut short (the request itself is retried by botocore)
FLUSH_SECONDS = 0.5  # how often the written parts are made durable (fdatasync) in the background
FLUSH_BYTES = 64 << 20  # ... or sooner, once this many bytes were written since the last flush (a fast link)
PREPARE_WORKERS = 8  # files whose kept parts are re-checked at once

#: A span of a part that is on disk: its offset in the part, its length, and its digests (hex) by algorithm. A span
#: kept from an earlier run has the first algorithm's only; a piece fetched by this run has every algorithm's.
Have = tuple[int, int, dict[str, str]]


@dataclasses.dataclass
class Job:
    """One file to fetch: where it goes, its journal, and what of it is on disk."""

    file: RemoteFile
    path: str
    journal: partjournal.PartJournal
    fd: int = -1
    digests: dict[int, dict[str, str]] = dataclasses.field(default_factory=dict)  # parts whole on disk
    #: part -> its spans on disk (kept or fetched), for the parts not yet whole
    have: dict[int, list[Have]] = dataclasses.field(default_factory=dict)
    missing: dict[int, int] = dataclasses.field(default_factory=dict)  # part -> bytes still to fetch

    @property
    def part_size(self) -> int:
        return self.journal.header.part_size

    @property
    def algorithms(self) -> tuple[str, ...]:
        return self.journal.header.algorithms

    def part_range(self, index: int) -> tuple[int, int]:
        return partjournal.part_range(index, self.file.size, self.part_size)

    def piece_cap(self, piece_size: int) -> int:
        """The largest piece of this file: `piece_size`, where every digest combines from pieces; else a whole part
        (a part of several pieces is read back for its MD5 or SHA, which only the tail should pay)."""
        if all(partdigests.combinable(a) for a in self.algorithms):
            return max(1, min(piece_size, self.part_size))
        return self.part_size


#: Called with a file whose parts are all written, and their digests in order.
OnFile = Callable[[RemoteFile, list[dict[str, str]]], None]


def prepare(job: Job) -> int:
    """Open the part file, keep the parts and spans an earlier run recorded that still check out; the bytes kept."""
    nofollow.drop_link(job.path)
    try:
        job.fd = nofollow.open_fd(job.path, os.O_RDWR)
        recorded, recorded_spans = job.journal.load(), job.journal.load_spans()
    except FileNotFoundError:  # no part file (never started, or removed after a failed check): nothing to keep
        job.fd = nofollow.open_fd(job.path, os.O_RDWR | os.O_CREAT)
        recorded, recorded_spans = {}, {}
    size, part_size, algorithm = job.file.size, job.part_size, job.algorithms[0]
    kept = partjournal.recheck(job.fd, recorded, size, part_size, algorithm, partdigests.of_range) if recorded else {}
    recorded_spans = {i: s for i, s in recorded_spans.items() if i not in kept}
    kept_spans = (
        partjournal.recheck_spans(job.fd, recorded_spans, size, part_size, algorithm, partdigests.of_range)
        if recorded_spans
        else {}
    )
    lost = len(recorded) - len(kept) + sum(map(len, recorded_spans.values())) - sum(map(len, kept_spans.values()))
    if lost:
        log.warning("%s: %d recorded parts or spans failed their re-check; fetching them again", job.file.path, lost)
    if kept or kept_spans:
        log.info(
            "%s: resuming with %d of %d parts and %d spans of others kept from an interrupted run",
            job.file.path,
            len(kept),
            partjournal.part_count(size, part_size),
            sum(map(len, kept_spans.values())),
        )
    if not kept and not kept_spans:
        os.ftruncate(job.fd, 0)
    os.ftruncate(job.fd, size)
    job.journal.start(kept, kept_spans)
    job.digests = kept
    job.have = {i: [(o, n, {algorithm: d}) for o, n, d in spans] for i, spans in kept_spans.items()}
    job.missing = {}
    for index in range(partjournal.part_count(size, part_size)):
        if index not in kept:
            length = job.part_range(index)[1]
            job.missing[index] = length - sum(n for _, n, _ in job.have.get(index, []))
    return sum(job.part_range(i)[1] for i in kept) + sum(n for s in kept_spans.values() for _, n, _ in s)


def gaps(jobs: Sequence[Job], piece_size: int) -> list[s3pieces.Gap]:
    """Every job's missing ranges, in order."""
    found: list[s3pieces.Gap] = []
    for n, job in enumerate(jobs):
        cap = job.piece_cap(piece_size)
        for index in sorted(job.missing):
            have = [(o, size) for o, size, _ in sorted(job.have.get(index, []), key=lambda h: h[0])]
            found += s3pieces.gaps(n, index, job.part_range(index)[1], have, cap)
    return found


class Transient(Exception):
    """A body cut short or a connection lost mid-read: the piece is fetched again."""


#: Told, after each read of a piece is written, how many bytes that read wrote, how many of the piece's bytes are
#: written, and their first-algorithm digest.
OnProgress = Callable[[int, int, str], None]


def _read_piece(
    get: Callable[[int, int], Any], job: Job, piece: s3pieces.Piece, progress: OnProgress
) -> dict[str, str]:
    offset = job.part_range(piece.part)[0] + piece.start
    hashers = {a: partdigests.hasher(a) for a in job.algorithms}
    running = {a: new() for a, new in hashers.items() if new is not None}
    first = running[job.algorithms[0]]
    buffer = s3bodies.buffer()
    body = get(offset, piece.length)
    read_into = s3bodies.reader(body)
    done = 0
    try:
        while done < piece.length:
            n = read_into(buffer[: min(len(buffer), piece.length - done)])
            if not n:
                raise Transient(f"body ended after {done} of {piece.length} bytes")
            chunk = buffer[:n]
            for h in running.values():
                h.update(chunk)
            written = 0
            while written < n:
                written += os.pwrite(job.fd, chunk[written:], offset + done + written)
            done += n
            progress(n, done, first.digest().hex())
    finally:
        body.close()
    return {a: h.digest().hex() for a, h in running.items()}


def part_digests(job: Job, index: int, spans: Sequence[Have]) -> dict[str, str]:
    """The digests of a whole part from the spans it came in: a CRC combined from theirs (a kept span's second CRC
    read back), an MD5 or SHA read back from disk unless one span is the whole part."""
    offset, length = job.part_range(index)
    ordered = sorted(spans, key=lambda s: s[0])
    if len(ordered) == 1 and set(ordered[0][2]) >= set(job.algorithms):
        return {a: ordered[0][2][a] for a in job.algorithms}
    digests = {}
    for algorithm in job.algorithms:
        if partdigests.combinable(algorithm):
            values = [
                (d.get(algorithm) or partdigests.of_range(job.fd, offset + o, n, algorithm), n) for o, n, d in ordered
            ]
            digests[algorithm] = partdigests.combine(algorithm, values).hex()
        else:
            digests[algorithm] = partdigests.of_range(job.fd, offset, length, algorithm)
    return digests


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, Transient | botocore.exceptions.ResponseStreamingError | botocore.exceptions.ReadTimeoutError):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return False
    return isinstance(exc, ConnectionError | TimeoutError) or type(exc).__module__.startswith("urllib3")


@dataclasses.dataclass
class Fetch:
    """What `fetch` needs besides the jobs: how to GET, how hard, and whom to tell."""

    get: Callable[[RemoteFile, int, int], Any]  # a readable body of (file, offset, length)
    concurrency: int
    piece_size: int  # the largest piece of a file whose digests combine from pieces
    on_bytes: OnBytes
    on_file: OnFile
    classify: Callable[[BaseException, RemoteFile], PreloadError]  # an exception as a PreloadError
    on_kept: OnBytes  # told the bytes kept from an earlier run


def fetch(jobs: Sequence[Job], how: Fetch) -> None:
    """Fetch every job's missing ranges; raise the first permanent failure (else the first failure). Part files
    stay open until the fetch ends."""
    lock = threading.Lock()
    failures: list[PreloadError] = []
    stop = threading.Event()
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, min(PREPARE_WORKERS, len(jobs)))) as pool:
            for kept in pool.map(prepare, jobs):
                how.on_kept(kept)
        for job in jobs:
            if not job.missing:  # every part kept
                _complete(job, how.on_file)
            for index in [i for i, left in job.missing.items() if not left]:  # an empty file; kept spans that cover
                _part_done(job, index, job.have.get(index, []), lock, how.on_file)  # the part; the last completes
        schedule = s3pieces.Schedule(gaps(jobs, how.piece_size), how.concurrency)
        writeback = Writeback()

        def worker() -> None:
            while not stop.is_set():
                piece = schedule.take()
                if piece is None:
                    return
                job = jobs[piece.job]
                try:
                    digests = _piece(job, piece, how.get, writeback)
                    with lock:
                        spans = job.have.setdefault(piece.part, [])
                        spans.append((piece.start, piece.length, digests))
                        job.missing[piece.part] -= piece.length
                        whole = job.missing[piece.part] == 0
                    how.on_bytes(piece.length)
                    if whole:
                        _part_done(job, piece.part, spans, lock, how.on_file)
                except BaseException as exc:  # noqa: BLE001 - recorded; the fetch raises it once every worker ends
                    with lock:
                        failures.append(how.classify(exc, job.file))
                    stop.set()

        threads = [
            threading.Thread(target=worker, name=f"s3-range-{i}", daemon=True) for i in range(max(1, how.concurrency))
        ]
        with writeback:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        for job in jobs:
            job.journal.close()
            if job.fd >= 0:
                os.close(job.fd)
                job.fd = -1
    if failures:
        raise sorted(failures, key=lambda f: f.reason == Reason.NETWORK_ERROR)[0]
    unfinished = [job.file.path for job in jobs if job.missing]
    if unfinished:  # a bug, never a partial file handed on
        raise PreloadError(Reason.INTERNAL_ERROR, f"the fetch ended with parts missing of {', '.join(unfinished)}")


def _part_done(job: Job, index: int, spans: list[Have], lock: threading.Lock, on_file: OnFile) -> None:
    """Journal a part whose bytes are all written; hand the file on once it was its last."""
    digests = part_digests(job, index, spans)
    job.journal.record({index: digests})
    with lock:
        job.digests[index] = digests
        del job.missing[index]
        job.have.pop(index, None)
        last = not job.missing
    if last:
        _complete(job, on_file)


class Writeback:
    """Makes the written parts durable in the background: every `interval` seconds (or once `flush_bytes` were
    written since the last time), one fdatasync per file written to, then one fsync of its journal.

    Nothing waits on it: parts and prefixes are journaled as soon as they are written, because a kill -9 of the
    process loses neither the bytes nor the lines (both are in the page cache). Gating the journal on the fdatasync
    made it lag the bytes on disk by the whole writeback backlog: on a link faster than the disk a kill lost
    hundreds of MiB, or everything before the first fdatasync returned. What this still bounds is a power loss
    (the lines and bytes the kernel had not written back are lost; the re-check on resume drops a recorded part
    whose bytes did not reach the disk). It also keeps the disk writing during the download, not after it."""

    def __init__(self, interval: float = FLUSH_SECONDS, flush_bytes: int = FLUSH_BYTES) -> None:
        self.interval, self.flush_bytes = interval, flush_bytes
        self.lock = threading.Lock()
        self.dirty: dict[int, Job] = {}
        self.written = 0  # bytes written since the last flush began
        self.due = threading.Event()  # set when `flush_bytes` were written, or to stop
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="s3-writeback", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Writeback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.due.set()
        self.thread.join()
        self.flush()

    def wrote(self, job: Job, n: int) -> None:
        """`n` new bytes of `job` are written (not yet durable)."""
        with self.lock:
            self.dirty[id(job)] = job
            self.written += n
            if self.written >= self.flush_bytes:
                self.due.set()

    def flush(self) -> None:
        with self.lock:
            batch, self.dirty = self.dirty, {}
            self.written = 0
            self.due.clear()
        for job in batch.values():
            if job.fd >= 0:
                os.fdatasync(job.fd)
                job.journal.sync()

    def _run(self) -> None:
        while True:
            self.due.wait(self.interval)
            if self.stopped.is_set():
                return
            try:
                self.flush()
            except OSError as exc:  # a disk error: the final flush raises it
                self.error = exc
                return


def _piece(
    job: Job, piece: s3pieces.Piece, get: Callable[[RemoteFile, int, int], Any], writeback: Writeback
) -> dict[str, str]:
    def progress(n: int, done: int, digest: str) -> None:
        job.journal.record({}, {piece.part: [(piece.start, done, digest)]})
        writeback.wrote(job, n)

    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _read_piece(lambda o, n: get(job.file, o, n), job, piece, progress)
        except BaseException as exc:
            if attempt == ATTEMPTS or not _transient(exc):
                raise
            log.info(
                "%s: part %d at +%d: %s; fetching it again (attempt %d)",
                job.file.path,
                piece.part,
                piece.start,
                exc,
                attempt + 1,
            )
    raise AssertionError("unreachable")


def _complete(job: Job, on_file: OnFile) -> None:
    count = partjournal.part_count(job.file.size, job.part_size)
    ordered: list[dict[str, str]] = [job.digests[i] for i in range(count)]
    on_file(job.file, ordered)
