"""One preload of one key: list, check capacity, resume, fetch, verify, publish; a Result, or PreloadError."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from warmstart.api.cachemanifests import CacheManifest, Identity
from warmstart.api.preloading import Reason, Result
from warmstart.preload import progress, store
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Listing, RemoteFile, Source

log = logging.getLogger(__name__)

VERIFY_WORKERS = 2


def same_producer(manifest: CacheManifest, identity: Identity | None) -> bool:
    """Whether the cache was produced by this very identity (then no re-check of access is needed)."""
    return identity is not None and manifest.producer == identity


def accept(manifest: CacheManifest, source: Source, identity: Identity | None) -> str | None:
    """Check this pod may read, and still sees, every cached file before it gets files another identity downloaded.

    Returns a note for the message, or None when the source's files (as this pod reaches them, with its own
    credentials and endpoints) are not the cached ones: then the cache is downloaded again, never handed out.
    Raises the source's PreloadError (AccessDenied, ...) when this pod may not read the source."""
    if same_producer(manifest, identity):
        return ""
    differing = source.authorize(manifest.files)
    if differing:
        log.warning(
            "the cached files differ from the source as this pod reaches it (%d of %d, e.g. %s): downloading again",
            len(differing),
            len(manifest.files),
            differing[0],
        )
        return None
    return f"; access and content of its {len(manifest.files)} files re-checked with this pod's identity"


def present(
    lay: store.Layout, started: float, identity: Identity | None, source: Source | None = None
) -> Result | None:
    """AlreadyPresent if a complete cache of the key exists (manifest + file sizes; no data is read) that this pod
    may use: produced under its own identity, or (given the source) after its access and the files' fingerprints
    were re-checked against the source."""
    published = store.read_published(lay)
    if published is None:
        return None
    manifest, digest = published
    if source is None and not same_producer(manifest, identity):
        return None  # the caller opens the source and asks again
    note = accept(manifest, source, identity) if source is not None else ""
    if note is None:
        return None
    return Result(
        Reason.ALREADY_PRESENT,
        f"{lay.final} is complete (manifest of {manifest.completed_at}){note}",
        bytes=manifest.total_bytes,
        seconds=time.monotonic() - started,
        files=len(manifest.files),
        manifest_sha256=digest,
    )


def manifest_entry(file: RemoteFile) -> dict[str, Any]:
    return {"path": file.path, **file.fingerprint()}


def preload(
    source: Source,
    lay: store.Layout,
    *,
    identity: Identity | None = None,
    if_missing: bool = False,
    expected_bytes: int = 0,
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
    progress_interval: float = 5.0,
) -> Result:
    started = time.monotonic()
    if if_missing and (result := present(lay, started, identity, source)) is not None:
        return result
    with store.locked(lay):
        if if_missing and (result := present(lay, started, identity, source)) is not None:
            return result  # another preload finished it while we waited for the lock
        listing = source.listing()
        store.check_tree(f.path for f in listing.files)
        log.info("source lists %d files, %s", len(listing.files), progress.human(listing.total_bytes))
        published = store.read_published(lay)
        existing, digest = published if published is not None else (None, "")
        if existing is not None and store.manifest_files(existing) == sorted(
            (manifest_entry(f) for f in listing.files), key=lambda e: e["path"]
        ):
            note = accept(existing, source, identity)
            if note is not None:
                return Result(
                    Reason.ALREADY_PRESENT,
                    f"{lay.final} is complete and matches the source{note}",
                    bytes=listing.total_bytes,
                    seconds=time.monotonic() - started,
                    files=len(listing.files),
                    manifest_sha256=digest,
                )
        try:
            return _download(source, lay, listing, identity, expected_bytes, statvfs, progress_interval, started)
        except OSError as exc:
            if not store.is_enospc(exc):
                raise
            store.discard_staging(lay)
            raise store.disk_full(lay.final, exc) from exc
        except PreloadError as exc:
            if exc.reason == Reason.DISK_FULL:
                store.discard_staging(lay)
            raise


def _download(
    source: Source,
    lay: store.Layout,
    listing: Listing,
    identity: Identity | None,
    expected_bytes: int,
    statvfs: Callable[[str], os.statvfs_result],
    progress_interval: float,
    started: float,
) -> Result:
    """Resume, check capacity, fetch and publish (under the key's lock, held by `preload`)."""
    staging = store.Staging(lay)
    kept = _resumable(staging, listing)
    todo = [f for f in listing.files if f not in kept]
    with store.guarded(staging.dir):
        staging.sweep(keep={f.path for f in kept} | {f.path + store.PART_SUFFIX for f in todo})  # parts may resume
    kept_bytes = sum(f.size for f in kept)
    needed = max(listing.total_bytes, expected_bytes) - kept_bytes
    capacity = store.check_capacity(needed, lay.key_dir, statvfs)
    log.info(
        "capacity: %s to write + %s margin, %s free",
        progress.human(capacity.needed),
        progress.human(capacity.margin),
        progress.human(capacity.available),
    )
    phases = {"prepare": time.monotonic() - started}
    fetched, kept_parts, failed = _fetch(source, staging, listing, todo, kept, kept_bytes, progress_interval, phases)
    if failed:  # kept files that failed their re-check, made during the fetch: fetched again now
        kept = [f for f in kept if f not in failed]
        kept_bytes = sum(f.size for f in kept)
        store.check_capacity(sum(f.size for f in failed), lay.key_dir, statvfs)
        again, _, _ = _fetch(source, staging, listing, failed, [], kept_bytes, progress_interval, phases)
        fetched += again
        todo += failed
    extra: dict[str, Any] = {"seconds": round(time.monotonic() - started, 3)}
    if listing.commit:
        extra["commit"] = listing.commit
    mark = time.monotonic()
    entries = [manifest_entry(f) for f in listing.files]
    with store.guarded(lay.key_dir):
        digest = staging.publish(store.build_manifest(lay, source.describe(), entries, extra, identity))
    phases["publish"] = time.monotonic() - mark
    seconds = time.monotonic() - started
    rate = progress.human(fetched / seconds) if seconds > 0 else "-"
    partial = f" with {progress.human(kept_parts)} of the partial files" if kept_parts else ""
    partial += f" ({len(failed)} failed their re-check and were fetched again)" if failed else ""
    timing = ", ".join(f"{name} {value:.2f}s" for name, value in phases.items())
    return Result(
        Reason.DOWNLOADED,
        f"{len(todo)} of {len(listing.files)} files fetched ({progress.human(fetched)} at {rate}/s), "
        f"{len(kept)} kept from an interrupted run{partial}; published {lay.final} ({timing})",
        bytes=listing.total_bytes,
        seconds=seconds,
        files=len(listing.files),
        kept=kept_bytes + kept_parts,
        manifest_sha256=digest,
    )


def _resumable(staging: store.Staging, listing: Listing) -> list[RemoteFile]:
    """Files an interrupted run verified for this same version and left whole: re-checked during the fetch."""
    kept = [f for f in listing.files if staging.journaled(f.path, f.fingerprint())]
    if kept:
        log.info("resuming: %d files kept from an interrupted run, re-checked while the rest downloads", len(kept))
    return kept


def _classified(exc: Exception, what: str) -> PreloadError:
    if isinstance(exc, PreloadError):
        return exc
    if isinstance(exc, OSError) and store.is_enospc(exc):
        return store.disk_full(what, exc)
    if isinstance(exc, OSError) and exc.errno in store.TAMPER_ERRNOS:
        return store.cache_tampered(what, exc)  # committing a verified file into staging
    return PreloadError(Reason.INTERNAL_ERROR, f"{what}: {exc}")


def _fetch(
    source: Source,
    staging: store.Staging,
    listing: Listing,
    todo: list[RemoteFile],
    kept: list[RemoteFile],
    kept_bytes: int,
    interval: float,
    phases: dict[str, float],
) -> tuple[int, int, list[RemoteFile]]:
    """Download `todo` into staging, verifying each file as it lands (while the others still download), and re-check
    the `kept` files from disk meanwhile; the bytes fetched, those of partial files kept from an interrupted run,
    and the kept files that failed their re-check (removed, to be fetched again)."""
    for file in todo:
        staging.make_parent(file.path)
    failures: list[PreloadError] = []
    failed: list[RemoteFile] = []
    lock = threading.Lock()
    meter = progress.Progress(listing.total_bytes, interval=interval, already=kept_bytes)

    def check(file: RemoteFile) -> None:
        try:
            source.verifier(file)(staging.part_path(file.path))
            staging.commit_file(file.path, file.fingerprint())
        except Exception as exc:  # noqa: BLE001 - recorded, then raised after every download settles
            with lock:
                failures.append(_classified(exc, file.path))
            staging.forget(file.path)

    def recheck(file: RemoteFile) -> None:
        try:
            source.verifier(file)(staging.path(file.path))
        except Exception as exc:  # noqa: BLE001 - a kept file that no longer checks out is fetched again
            log.warning("fetching %s again: %s", file.path, exc)
            staging.forget(file.path)
            with lock:
                failed.append(file)

    with concurrent.futures.ThreadPoolExecutor(VERIFY_WORKERS, thread_name_prefix="verify") as verifiers, meter:
        pending = [verifiers.submit(recheck, f) for f in kept]
        mark = time.monotonic()
        try:
            if todo:
                source.fetch(
                    todo,
                    lambda f: staging.part_path(f.path),
                    meter.add,
                    lambda f: pending.append(verifiers.submit(check, f)),
                    staging.tmp_dir("source"),
                    on_kept=meter.keep,
                )
            phases["fetch"] = phases.get("fetch", 0.0) + time.monotonic() - mark
        finally:
            mark = time.monotonic()
            concurrent.futures.wait(list(pending))
            phases["verify tail"] = phases.get("verify tail", 0.0) + time.monotonic() - mark
    if failures:
        raise failures[0]
    return meter.fetched, meter.already - kept_bytes, failed
