"""S3 downloads split across several processes, each with its own GIL and connection pool.

One Python process moving bytes through botocore is CPU-bound at a few hundred MB/s (about 1 CPU-second per
GiB measured, under one GIL). With `--processes N` the files are dealt to N spawned workers, largest first, to even
out bytes; each reports bytes, failures and finished files over a queue, a finished file with its check plan and its
parts' digests, so the parent checks it as the threaded path does, without reading it again. A worker dies with its
parent (PR_SET_PDEATHSIG), so a kill -9 of the preload leaves no writer behind.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import queue as queues
import signal
import threading
from collections.abc import Callable
from typing import Any, Protocol

from warmstart.api.preloading import Reason
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import OnBytes, Options, RemoteFile, s3plans

#: Called with a file whose parts all landed, its check plan and its parts' digests in order (picklable).
OnLanded = Callable[[RemoteFile, s3plans.Plan, list[dict[str, str]]], None]


class PartSource(Protocol):
    """What a worker runs: a fetch that reports each landed file with its plan and part digests."""

    def fetch_parts(
        self,
        files: list[RemoteFile],
        part_path: Callable[[RemoteFile], str],
        on_bytes: OnBytes,
        on_file: OnLanded,
        scratch: str,
        on_kept: OnBytes | None = None,
    ) -> None: ...


#: Builds, in a worker process, the source that fetches that worker's files (picklable: it crosses the spawn).
SourceFactory = Callable[[Options], PartSource]

BYTES_BATCH = 4 << 20  # a worker reports progress every 4 MiB, not every chunk


def deal(files: list[RemoteFile], count: int) -> list[list[RemoteFile]]:
    """Files into `count` groups of about equal bytes (largest first, each to the lightest group)."""
    groups: list[list[RemoteFile]] = [[] for _ in range(count)]
    weights = [0] * count
    for file in sorted(files, key=lambda f: -f.size):
        lightest = weights.index(min(weights))
        groups[lightest].append(file)
        weights[lightest] += file.size
    return [g for g in groups if g]


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(
    worker: int, factory: SourceFactory, options: Options, jobs: list[tuple[RemoteFile, str]], scratch: str, out: Any
) -> None:
    _die_with_parent()
    paths = {file.ref: path for file, path in jobs}
    lock = threading.Lock()
    pending = [0]

    def on_bytes(n: int) -> None:
        with lock:
            pending[0] += n
            if pending[0] < BYTES_BATCH:
                return
            n, pending[0] = pending[0], 0
        out.put(("bytes", worker, n))

    try:
        source = factory(options)

        def on_file(file: RemoteFile, plan: s3plans.Plan, digests: list[dict[str, str]]) -> None:
            out.put(("done", worker, file.ref, plan, digests))

        def on_kept(n: int) -> None:
            out.put(("kept", worker, n))

        source.fetch_parts([f for f, _ in jobs], lambda f: paths[f.ref], on_bytes, on_file, scratch, on_kept)
    except PreloadError as exc:
        out.put(("error", worker, exc.reason.value, exc.message))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which owns the result
        out.put(("error", worker, Reason.INTERNAL_ERROR.value, f"download worker: {type(exc).__name__}: {exc}"))
    finally:
        out.put(("bytes", worker, pending[0]))
        out.put(("exit", worker))


def fetch(
    factory: SourceFactory,
    options: Options,
    files: list[RemoteFile],
    part_path: Callable[[RemoteFile], str],
    on_bytes: OnBytes,
    on_file: OnLanded,
    processes: int,
    scratch: str,
    on_kept: OnBytes | None = None,
) -> None:
    """Download `files` with `processes` workers; raise the first permanent failure (else the first failure).

    Each worker builds its own source with `factory(options)`, its share of the concurrency in `options`."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    groups = deal(files, processes)
    per_worker = Options(
        concurrency=max(1, -(-options.concurrency // len(groups))),
        part_size=options.part_size,
        mount_root=options.mount_root,
        env=dict(options.env),
    )
    workers = [
        ctx.Process(
            target=_worker,
            args=(i, factory, per_worker, [(f, part_path(f)) for f in g], scratch, out),
            name=f"preload-s3-{i}",
            daemon=True,
        )
        for i, g in enumerate(groups)
    ]
    for w in workers:
        w.start()
    by_ref = {f.ref: f for f in files}
    running = set(range(len(workers)))
    killed: set[int] = set()
    failures: list[PreloadError] = []
    try:
        while running:
            try:
                message = out.get(timeout=1.0)
            except queues.Empty:
                for i in [i for i in running if workers[i].exitcode is not None]:
                    running.discard(i)  # gone without saying "exit": killed by us, or crashed
                    if i not in killed:
                        failures.append(
                            PreloadError(
                                Reason.INTERNAL_ERROR, f"download worker {i} died (exit {workers[i].exitcode})"
                            )
                        )
                continue
            kind, worker = message[0], message[1]
            if kind == "bytes":
                on_bytes(message[2])
            elif kind == "kept":
                (on_kept or on_bytes)(message[2])
            elif kind == "done":
                on_file(by_ref[message[2]], message[3], message[4])
            elif kind == "error":
                failures.append(PreloadError(Reason(message[2]), message[3]))
                for i in running - {worker} - killed:
                    workers[i].kill()  # one failure fails the preload: stop the others
                    killed.add(i)
            elif kind == "exit":
                running.discard(worker)
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
            w.join()
    if failures:
        raise sorted(failures, key=lambda f: f.reason == Reason.NETWORK_ERROR)[0]
