"""Scenario 4: faults during `warmstart preload` against a real S3 server (moto's, in its own process).

- kill -9 at a random byte offset of the download, then a rerun: nothing is published before the copy is whole, the
  rerun keeps what the journal verified and publishes exactly the uploaded bytes;
- ENOSPC on a small tmpfs that another writer fills mid-download: DiskFull, retryable, nothing published, staging gone,
  and a rerun after the space is back completes;
- S3 5xx, slow and cut-short answers through a fault-injecting proxy: transient faults end either in a whole cache or
  in a retryable NetworkError, permanent answers (403, 404) in a permanent reason; never an incomplete cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import psutil

from chaos_faultproxy import FaultProxy
from chaos_report import Run
from preloadhelpers import cache_dir, digests, preload_process, put, s3_source, tree_digests
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api.preloading import Reason, is_retryable

MIB = 1 << 20
SCENARIO_KILL = "preload: kill -9 at a random byte offset, then resume"
SCENARIO_ENOSPC = "preload: ENOSPC on a small tmpfs mid-download"
SCENARIO_S3 = "preload: S3 5xx / slow / cut answers (proxy)"

#: fault -> the reasons a run may end with (success reasons for transient faults boto retries through)
TRANSIENT_OK = {Reason.DOWNLOADED.value, Reason.NETWORK_ERROR.value}
S3_FAULTS: list[tuple[str, float, bool, set[str]]] = [
    # mode, rate, all requests, allowed reasons
    ("503", 0.2, False, TRANSIENT_OK),
    ("500", 0.2, False, TRANSIENT_OK),
    ("slow", 0.5, False, {Reason.DOWNLOADED.value}),
    ("cut", 0.2, False, TRANSIENT_OK),
    ("503", 1.0, True, {Reason.NETWORK_ERROR.value}),
    ("500", 1.0, False, {Reason.NETWORK_ERROR.value}),
    ("403", 1.0, False, {Reason.ACCESS_DENIED.value}),
    ("404", 1.0, False, {Reason.NOT_FOUND.value}),
]


class Bench:
    """A moto S3 server, a fault proxy in front of it and a scratch root, for one scenario's runs."""

    def __init__(self, seed: int) -> None:
        self.moto = MotoServer().start()
        self.proxy = FaultProxy(self.moto.url, seed)
        self.s3 = boto3.client("s3", endpoint_url=self.moto.url, region_name="us-east-1", **_keys())
        self.scratch = pathlib.Path(tempfile.mkdtemp(prefix="chaos-preload-"))

    def env(self, through_proxy: bool = False) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": self.proxy.url if through_proxy else self.moto.url}

    def model(self, count: int, size: int, rng: random.Random) -> tuple[str, dict[str, bytes]]:
        bucket = f"chaos-{uuid.uuid4().hex[:10]}"
        self.s3.create_bucket(Bucket=bucket)
        files = {f"shard-{i:02d}.safetensors": rng.randbytes(size) for i in range(count)}
        files["config.json"] = json.dumps({"seed": rng.random()}).encode()
        for name, data in files.items():
            put(self.s3, bucket, f"m/{name}", data, part_size=5 * MIB if len(data) > 5 * MIB else None)
        return bucket, files

    def close(self) -> None:
        self.proxy.stop()
        self.moto.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": "testing"}


def _args(bucket: str, key: str) -> list[str]:
    return ["--source-json", s3_source(bucket, "m"), "--key", key, "--concurrency", "4", "--part-size-mb", "1"]


def _finish(proc: subprocess.Popen[bytes], tlog: pathlib.Path, timeout: float) -> tuple[int, dict[str, Any]]:
    """Wait for a preload process; its exit code and termination message ({} if none)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9, {"reason": "Hung", "message": f"no result in {timeout:.0f} s"}
    try:
        return proc.returncode, json.loads(tlog.read_text())
    except (OSError, ValueError):
        return proc.returncode, {}


def _written(proc: subprocess.Popen[bytes]) -> int:
    """Bytes the preload and its workers have written so far (write syscalls)."""
    try:
        parent = psutil.Process(proc.pid)
        total = parent.io_counters().write_chars
        for child in parent.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += child.io_counters().write_chars
        return int(total)
    except psutil.Error:
        return 0


def _leftovers(root: pathlib.Path, key: str) -> list[str]:
    """What the key's tree holds besides its lock (which stays): `model` once published, and any leftover."""
    tree = root / "warmstart" / "keys" / key
    if not tree.exists():
        return []
    return sorted(p.name for p in tree.iterdir() if p.name != ".lock")


#: tries per kill run to land the kill before the preload completes (a fast download can beat a late offset)
KILL_TRIES = 5


def _kill_at(bench: Bench, bucket: str, key: str, root: pathlib.Path, offset: int) -> tuple[bool, int, list[str]]:
    """Start a preload, SIGKILL it once it has written `offset` bytes. Whether the kill landed before the preload
    completed (it was running, died of the signal, and published nothing), the bytes written then, and leaks."""
    proc = preload_process(*_args(bucket, key), root=root, env=bench.env(), tlog=root / "t1")
    while proc.poll() is None and _written(proc) < offset:
        time.sleep(0.005)
    children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    killed_at = _written(proc)
    running = proc.poll() is None
    if running:
        os.kill(proc.pid, signal.SIGKILL)
    code = proc.wait()
    _, alive = psutil.wait_procs(children, timeout=20)
    leaks = [f"{len(alive)} download workers outlived the killed preload"] if alive else []
    landed = running and code == -signal.SIGKILL and not cache_dir(root, key).exists()
    return landed, killed_at, leaks


def kill_runs(bench: Bench, runs: int, seed: int, deadline: float) -> Iterator[Run]:
    """`runs` preloads, each SIGKILLed at a random byte offset before it completed, then rerun with --if-missing: the
    rerun must take the resume path (keep what the killed run verified) and publish exactly the uploaded bytes. A
    kill that came too late (the preload had finished or published) does not count: it is tried again."""
    rng = random.Random(seed)
    bucket, files = bench.model(8, 3 * MIB, rng)
    total = sum(len(v) for v in files.values())
    for i in range(runs):
        if time.monotonic() > deadline:
            return
        key = f"kill-{i}"
        for attempt in range(KILL_TRIES):
            root = bench.scratch / f"kill-{i}-{attempt}"
            root.mkdir()
            landed, killed_at, leaks = _kill_at(bench, bucket, key, root, rng.randrange(total // 20, total * 3 // 4))
            if landed:
                break
            shutil.rmtree(root, ignore_errors=True)
        else:
            violation = f"no kill landed before the preload completed in {KILL_TRIES} tries"
            yield Run(SCENARIO_KILL, i, False, 0.0, [], [violation], "kill never landed")
            continue
        yield _resumed(bench, bucket, key, root, files, (killed_at, total), leaks, i)
        shutil.rmtree(root, ignore_errors=True)


def _resumed(
    bench: Bench,
    bucket: str,
    key: str,
    root: pathlib.Path,
    files: dict[str, bytes],
    at: tuple[int, int],
    leaks: list[str],
    seed: int,
) -> Run:
    """Rerun a killed preload with --if-missing and check it resumed: nothing published incomplete by the killed
    run, the rerun kept bytes of it (`kept` in its result), and the cache published is exactly the uploaded model."""
    killed_at, total = at
    violations: list[str] = []
    published = cache_dir(root, key)
    if published.exists():
        violations.append(f"an incomplete cache was published (killed at ~{killed_at} B)")
    started = time.monotonic()
    rerun = preload_process(*_args(bucket, key), "--if-missing", root=root, env=bench.env(), tlog=root / "t2")
    code, result = _finish(rerun, root / "t2", 120)
    seconds = time.monotonic() - started
    converged = code == 0 and result.get("reason") == Reason.DOWNLOADED.value
    if converged and tree_digests(published) != digests(files):
        violations.append("the resumed cache differs from the uploaded model")
    if not converged:
        violations.append(f"rerun ended {code} {result.get('reason')}: {result.get('message')}")
    kept = int(result.get("kept") or 0)
    if converged and not 0 < kept <= total:
        violations.append(f"the rerun did not resume: it kept {kept} B of the killed run's download")
    extra = [name for name in _leftovers(root, key) if name != "model"]
    if extra:
        leaks.append(f"left after the rerun: {extra}")
    note = f"killed at {killed_at / MIB:.1f} of {total / MIB:.1f} MiB; resumed with {kept / MIB:.1f} MiB kept"
    return Run(SCENARIO_KILL, seed, converged, seconds, leaks, violations, note)


@contextlib.contextmanager
def _tmpfs(path: pathlib.Path, size_mib: int) -> Iterator[pathlib.Path]:
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs (run as root): {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def enospc_runs(bench: Bench, runs: int, seed: int, deadline: float) -> Iterator[Run]:
    """The model fits the disk when the preload checks, then another writer takes the space mid-download."""
    rng = random.Random(seed)
    bucket, files = bench.model(4, 3 * MIB, rng)
    for i in range(runs):
        if time.monotonic() > deadline:
            return
        # the preload wants the model plus a 1 GB margin free before it starts: the tmpfs has just that much
        with _tmpfs(bench.scratch / f"tmpfs-{i}", 1000) as root:
            key = f"full-{i}"
            leaks: list[str] = []
            violations: list[str] = []
            filler = root / "other-writer.bin"
            bench.proxy.set("slow", 1.0, delay=0.8)  # a slow store, so the other writer fills the disk mid-download
            proc = preload_process(*_args(bucket, key), root=root, env=bench.env(True), tlog=bench.scratch / f"e{i}")
            threshold = rng.randrange(MIB, 4 * MIB)
            while proc.poll() is None and _written(proc) < threshold:
                time.sleep(0.002)
            with contextlib.suppress(OSError), open(filler, "wb") as f:  # take the free space at once, then the rest
                free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
                os.posix_fallocate(f.fileno(), 0, max(MIB, free - MIB))
                f.seek(0, os.SEEK_END)
                while True:
                    f.write(b"\1" * MIB)
                    f.flush()
            code, result = _finish(proc, bench.scratch / f"e{i}", 120)
            bench.proxy.set("none")
            reason = str(result.get("reason"))
            if reason == "Downloaded":
                note = "the download finished before the disk filled"
            else:
                note = f"{reason}, exit {code}"
                if reason != Reason.DISK_FULL.value:
                    violations.append(f"ended {reason} ({result.get('message')}), expected DiskFull")
                if result.get("retryable") is not True or not is_retryable(reason):
                    violations.append(f"{reason} not classified retryable")
                if cache_dir(root, key).exists():
                    violations.append("a cache was published on a full disk")
                if _leftovers(root, key):
                    leaks.append(f"staging left on the full disk: {_leftovers(root, key)}")
            filler.unlink()
            started = time.monotonic()
            rerun = preload_process(*_args(bucket, key), root=root, env=bench.env(), tlog=bench.scratch / f"r{i}")
            code, result = _finish(rerun, bench.scratch / f"r{i}", 120)
            converged = (
                code == 0 and cache_dir(root, key).exists() and tree_digests(cache_dir(root, key)) == digests(files)
            )
            if not converged:
                violations.append(f"rerun after freeing space ended {code} {result.get('reason')}")
            yield Run(SCENARIO_ENOSPC, i, converged, time.monotonic() - started, leaks, violations, note)


def s3_runs(bench: Bench, runs: int, seed: int, deadline: float) -> Iterator[Run]:
    """Each run: one fault of S3_FAULTS through the proxy, then a clean rerun (the resume)."""
    rng = random.Random(seed)
    bucket, files = bench.model(4, 3 * MIB, rng)
    for i in range(runs):
        if time.monotonic() > deadline:
            return
        mode, rate, everything, allowed = S3_FAULTS[i % len(S3_FAULTS)]
        root = bench.scratch / f"s3-{i}"
        root.mkdir()
        key = f"s3-{i}"
        violations: list[str] = []
        bench.proxy.set(mode, rate, everything, delay=rng.uniform(0.2, 1.0))
        started = time.monotonic()
        proc = preload_process(*_args(bucket, key), root=root, env=bench.env(True), tlog=root / "t1")
        code, result = _finish(proc, root / "t1", 180)
        reason = str(result.get("reason"))
        injected = bench.proxy.injected
        bench.proxy.set("none")
        note = f"{mode} x{rate:g}{' all' if everything else ''}: {injected} injected, ended {reason}"
        if reason not in allowed:
            violations.append(f"{mode} at {rate:g}: ended {reason} ({result.get('message')}), expected {allowed}")
        if result and bool(result.get("retryable")) != is_retryable(reason):
            violations.append(f"{reason}: retryable={result.get('retryable')} in the message")
        if reason == "Downloaded" and tree_digests(cache_dir(root, key)) != digests(files):
            violations.append("published bytes differ from the uploaded model")
        if reason != "Downloaded" and cache_dir(root, key).exists():
            violations.append(f"a cache was published after {reason}")
        converged = reason == "Downloaded"
        if not converged:  # the resume, once the store is healthy again
            rerun = preload_process(*_args(bucket, key), root=root, env=bench.env(True), tlog=root / "t2")
            code, result = _finish(rerun, root / "t2", 120)
            converged = code == 0 and tree_digests(cache_dir(root, key)) == digests(files)
            if not converged:
                violations.append(f"rerun on a healthy store ended {code} {result.get('reason')}")
        yield Run(SCENARIO_S3, i, converged, time.monotonic() - started, [], violations, note)
        shutil.rmtree(root, ignore_errors=True)


def run_all(kills: int, enospc: int, s3: int, seed: int, deadline: float, report: Callable[[Run], None]) -> list[Run]:
    bench = Bench(seed)
    out: list[Run] = []
    start = time.monotonic()
    # each kind gets its share of the time: the kills alone could use all of it
    shares = ((0.0, 0.5), (0.5, 0.65), (0.65, 1.0))
    kinds: list[Callable[[float], Iterator[Run]]] = [
        lambda end: kill_runs(bench, kills, seed, end),
        lambda end: enospc_runs(bench, enospc, seed, end),
        lambda end: s3_runs(bench, s3, seed, end),
    ]
    try:
        for (_, until), produce in zip(shares, kinds, strict=True):
            for run in produce(start + (deadline - start) * until):
                report(run)
                out.append(run)
    finally:
        bench.close()
    return out
