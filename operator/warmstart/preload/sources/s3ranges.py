"""Parallel ranged GETs of S3 objects into their part files, each part journaled as it is written, so a resume
skips it.

Parts of every file go through one pool of `concurrency` threads, file by file (largest first), so files finish
early and one after the other. A worker GETs its range (If-Match on the listed ETag), reads the body into a
reused buffer (`s3bodies`), digests each read (hashlib and awscrt release the GIL), `pwrite`s it at its offset and
appends the part's written prefix (bytes and CRC) to the file's `partjournal`; a whole part is journaled with its
digests. Nothing waits for the disk: a kill -9 keeps the bytes and the lines alike (the page cache outlives the
process), so it loses only the reads in progress. `Writeback` makes them durable in the background (an fdatasync
per file every half second, or once 64 MiB were written), which bounds what a power loss takes; the re-check on
resume catches that. A file whose parts are all there is handed to `on_done` with its parts' digests. On start, the
parts and prefixes an earlier run recorded are re-checked from disk and kept; a kept prefix is read back into the
part's digests and only the rest is fetched.
"""

from __future__ import annotations

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
from warmstart.preload.sources import OnBytes, RemoteFile, s3bodies

log = logging.getLogger(__name__)

ATTEMPTS = 5  # per part, for a body cut short (the request itself is retried by botocore)
FLUSH_SECONDS = 0.5  # how often the written parts are made durable (fdatasync) in the background
FLUSH_BYTES = 64 << 20  # ... or sooner, once this many bytes were written since the last flush (a fast link)


@dataclasses.dataclass
class Job:
    """One file to fetch: where it goes, its journal, and the parts still to get."""

    file: RemoteFile
    path: str
    journal: partjournal.PartJournal
    fd: int = -1
    digests: dict[int, dict[str, str]] = dataclasses.field(default_factory=dict)
    todo: list[int] = dataclasses.field(default_factory=list)
    #: part -> its first bytes kept from an earlier run (written and re-checked): only the rest is fetched
    prefixes: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def part_size(self) -> int:
        return self.journal.header.part_size

    @property
    def algorithms(self) -> tuple[str, ...]:
        return self.journal.header.algorithms


#: Called with a file whose parts are all written, and their digests in order.
OnFile = Callable[[RemoteFile, list[dict[str, str]]], None]


def prepare(job: Job) -> int:
    """Open the part file, keep the parts and part prefixes an earlier run recorded that still check out; the bytes
    kept."""
    nofollow.drop_link(job.path)
    try:
        job.fd = nofollow.open_fd(job.path, os.O_RDWR)
        recorded, recorded_prefixes = job.journal.load(), job.journal.load_prefixes()
    except FileNotFoundError:  # no part file (never started, or removed after a failed check): nothing to keep
        job.fd = nofollow.open_fd(job.path, os.O_RDWR | os.O_CREAT)
        recorded, recorded_prefixes = {}, {}
    size, part_size, algorithm = job.file.size, job.part_size, job.algorithms[0]
    kept = partjournal.recheck(job.fd, recorded, size, part_size, algorithm, partdigests.of_range) if recorded else {}
    recorded_prefixes = {i: p for i, p in recorded_prefixes.items() if i not in kept}
    kept_prefixes = (
        partjournal.recheck_prefixes(job.fd, recorded_prefixes, size, part_size, algorithm, partdigests.of_range)
        if recorded_prefixes
        else {}
    )
    lost = len(recorded) - len(kept) + len(recorded_prefixes) - len(kept_prefixes)
    if lost:
        log.warning("%s: %d recorded parts failed their re-check; fetching them again", job.file.path, lost)
    if kept or kept_prefixes:
        log.info(
            "%s: resuming with %d of %d parts and %d part prefixes kept from an interrupted run",
            job.file.path,
            len(kept),
            partjournal.part_count(size, part_size),
            len(kept_prefixes),
        )
    if not kept and not kept_prefixes:
        os.ftruncate(job.fd, 0)
    os.ftruncate(job.fd, size)
    job.journal.start(kept, kept_prefixes)
    job.digests = kept
    job.prefixes = {i: length for i, (length, _) in kept_prefixes.items()}
    job.todo = [i for i in range(partjournal.part_count(size, part_size)) if i not in kept]
    return sum(partjournal.part_range(i, size, part_size)[1] for i in kept) + sum(job.prefixes.values())


class Transient(Exception):
    """A body cut short or a connection lost mid-read: the part is fetched again."""


#: Told, after each read of a part is written, how many bytes that read wrote, how many of the part's first bytes
#: are written, and their first-algorithm digest.
OnProgress = Callable[[int, int, str], None]


def _read_part(get: Callable[[int, int], Any], job: Job, index: int, progress: OnProgress) -> dict[str, str]:
    offset, length = partjournal.part_range(index, job.file.size, job.part_size)
    hashers = {a: partdigests.hasher(a) for a in job.algorithms}
    running = {a: new() for a, new in hashers.items() if new is not None}
    first = running.get(job.algorithms[0])
    buffer = s3bodies.buffer()
    start = job.prefixes.get(index, 0)
    _digest_from_disk(job.fd, offset, start, list(running.values()), buffer)
    if length > start:
        body = get(offset + start, length - start)
        read_into = s3bodies.reader(body)
        done = start
        try:
            while done < length:
                n = read_into(buffer[: min(len(buffer), length - done)])
                if not n:
                    raise Transient(f"body ended after {done - start} of {length - start} bytes")
                chunk = buffer[:n]
                for h in running.values():
                    h.update(chunk)
                written = 0
                while written < n:
                    written += os.pwrite(job.fd, chunk[written:], offset + done + written)
                done += n
                progress(n, done, first.digest().hex() if first is not None and done < length else "")
        finally:
            body.close()
    return {a: h.digest().hex() for a, h in running.items()}


def _digest_from_disk(fd: int, offset: int, length: int, hashers: list[Any], buffer: memoryview) -> None:
    """Feed `length` bytes at `offset` of `fd` (a prefix kept from an earlier run) to `hashers`."""
    done = 0
    while done < length:
        n = os.preadv(fd, [buffer[: min(len(buffer), length - done)]], offset + done)
        if n <= 0:
            raise Transient(f"the kept prefix ended after {done} of {length} bytes")
        for h in hashers:
            h.update(buffer[:n])
        done += n


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, Transient | botocore.exceptions.ResponseStreamingError | botocore.exceptions.ReadTimeoutError):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return False
    return isinstance(exc, ConnectionError | TimeoutError) or type(exc).__module__.startswith("urllib3")


def fetch(
    jobs: Sequence[Job],
    get: Callable[[RemoteFile, int, int], Any],
    concurrency: int,
    on_bytes: OnBytes,
    on_file: OnFile,
    classify: Callable[[BaseException, RemoteFile], PreloadError],
    on_kept: OnBytes,
) -> None:
    """Fetch every job's missing parts; raise the first permanent failure (else the first failure).

    `get(file, offset, length)` returns a readable body of that range; `classify` maps an exception to a
    PreloadError; `on_kept` is told the bytes kept from an earlier run. Part files stay open until the fetch ends."""
    lock = threading.Lock()
    failures: list[PreloadError] = []
    stop = threading.Event()
    remaining: dict[int, int] = {}
    try:
        for n, job in enumerate(jobs):
            on_kept(prepare(job))
            remaining[n] = len(job.todo)
        for n, job in enumerate(jobs):
            if not remaining[n]:
                _complete(job, on_file)
        writeback = Writeback()
        cursor = iter([(n, job, i) for n, job in enumerate(jobs) for i in job.todo])

        def worker() -> None:
            while not stop.is_set():
                with lock:
                    item = next(cursor, None)
                if item is None:
                    return
                n, job, index = item
                try:
                    digests = _part(job, index, get, on_bytes, writeback)
                    with lock:
                        job.digests[index] = digests
                        remaining[n] -= 1
                        last = remaining[n] == 0
                    if last:
                        _complete(job, on_file)
                except BaseException as exc:  # noqa: BLE001 - recorded; the fetch raises it once every worker ends
                    with lock:
                        failures.append(classify(exc, job.file))
                    stop.set()

        threads = [
            threading.Thread(target=worker, name=f"s3-range-{i}", daemon=True) for i in range(max(1, concurrency))
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


def _part(
    job: Job, index: int, get: Callable[[RemoteFile, int, int], Any], on_bytes: OnBytes, writeback: Writeback
) -> dict[str, str]:
    def progress(n: int, length: int, digest: str) -> None:
        if digest:  # a prefix, not the whole part (journaled below with all its digests)
            job.journal.record({}, {index: (length, digest)})
        writeback.wrote(job, n)

    for attempt in range(1, ATTEMPTS + 1):
        try:
            digests = _read_part(lambda o, n: get(job.file, o, n), job, index, progress)
            break
        except BaseException as exc:
            if attempt == ATTEMPTS or not _transient(exc):
                raise
            log.info("%s: part %d: %s; fetching it again (attempt %d)", job.file.path, index, exc, attempt + 1)
    job.journal.record({index: digests})
    on_bytes(partjournal.part_range(index, job.file.size, job.part_size)[1] - job.prefixes.get(index, 0))
    return digests


def _complete(job: Job, on_file: OnFile) -> None:
    count = partjournal.part_count(job.file.size, job.part_size)
    ordered: list[dict[str, str]] = [job.digests[i] for i in range(count)]
    on_file(job.file, ordered)
