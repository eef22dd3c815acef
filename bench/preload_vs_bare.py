"""Benchmark `warmstart preload` against a bare client that does only what a preload must, and against naive boto3.

The bare client (BARE below, its own process like the others) lists the objects, HEADs each one for its checksum,
fetches it in ranged GETs from a pool of threads (the preload's `--concurrency` and part size; file by file, largest
first, as the preload), reads each body with http.client's `readinto` into one buffer per thread, `pwrite`s it where
it belongs and digests it as it arrives with the one check the object offers (the preload's own choice,
`s3plans.choose`: a full-object CRC combined from the parts, a composite or multipart-ETag digest, or the MD5 of a
single-part object); then it fsyncs each file and compares the object's checksum. A thread fdatasyncs the files
every 0.5 s or 64 MiB written, so the disk writes during the download (the preload does the same). It keeps no
journal, no progress, no manifest, no staging directory and no atomic rename, and digests each part once (the
preload also keeps a CRC64NVME per part for its resume journal): what the preload does beyond it is what the ratio
measures. Times are in-process, from the listing to the last fsync (the naive baseline's from after its listing).
The naive baseline is boto3's `download_file` per object in sequence, with fsync (bench/preload.py's).

One run serves a synthetic model (bench/preload.py's `make_model`) from moto, versitygw and the file-backed server
(`preload_s3server.py`) in turn; against each server the three clients run interleaved, `--repeats` rounds, and the
median of each is reported with every run, the servers' CPU and the load average.

    nice .venv/bin/python bench/preload_vs_bare.py [--servers moto,versitygw,file-s3] [--repeats 3]
        [--json bench/results/<date>-preload-vs-bare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preload as base
from preload_s3server import FileS3Server

MIB = base.MIB

BARE = r"""
import os, sys, time, threading
from concurrent.futures import ThreadPoolExecutor
import boto3, botocore.config
from warmstart.preload import partdigests
from warmstart.preload.sources import RemoteFile, s3plans

bucket, dest, endpoint = sys.argv[1:4]
concurrency, part_size = int(sys.argv[4]), int(sys.argv[5])
config = botocore.config.Config(max_pool_connections=concurrency, retries={"max_attempts": 3})
s3 = boto3.client("s3", endpoint_url=endpoint, config=config)
t0 = time.monotonic()
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="model/")
listed = [o for p in pages for o in p.get("Contents", [])]
files = [
    RemoteFile(path=o["Key"][len("model/"):], size=o["Size"], ref=o["Key"], etag=o["ETag"].strip('"'),
               checksum_algorithms=tuple(o.get("ChecksumAlgorithm") or ()))
    for o in listed
]

def plan_of(f):
    head = None
    if s3plans.needs_head(f, part_size):
        head = s3.head_object(Bucket=bucket, Key=f.ref, ChecksumMode="ENABLED")
    hint = lambda: s3.head_object(Bucket=bucket, Key=f.ref, PartNumber=1).get("ContentLength")
    return s3plans.choose(f, part_size, head, hint)

plans = {f.ref: plan_of(f) for f in files}
fds = {}
for f in files:
    path = os.path.join(dest, f.path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fds[f.ref] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fds[f.ref], f.size)
digests = {}
tasks = []
for f in files:
    step = plans[f.ref].part_size
    count = max(1, -(-f.size // step))
    digests[f.ref] = [None] * count
    tasks += [(f, i, i * step, min(step, f.size - i * step)) for i in range(count)]

local = threading.local()


def fetch(task):
    f, index, offset, length = task
    plan = plans[f.ref]
    algorithm = plan.algorithm or partdigests.local_algorithm()
    h = partdigests.hasher(algorithm)()
    span = f"bytes={offset}-{offset + length - 1}"
    body = s3.get_object(Bucket=bucket, Key=f.ref, Range=span, IfMatch=f.etag)["Body"]
    raw = body._raw_stream  # urllib3's response; http.client's below reads into our buffer without a copy
    view = getattr(local, "view", None) or setattr(local, "view", memoryview(bytearray(1 << 20))) or local.view
    at = offset
    while n := raw._fp.readinto(view):
        h.update(view[:n])
        at += os.pwrite(fds[f.ref], view[:n], at)
        with lock:
            written[0] += n
            if written[0] >= 64 << 20:
                due.set()
    raw.release_conn()
    if at != offset + length:
        raise RuntimeError(f"{f.ref}: short part {index}")
    digests[f.ref][index] = {algorithm: h.digest().hex()}

lock, written, due, done = threading.Lock(), [0], threading.Event(), threading.Event()


def writeback():  # the disk writes during the download, not after it: fdatasync every 0.5 s or 64 MiB
    while not done.is_set():
        due.wait(0.5)
        with lock:
            written[0] = 0
            due.clear()
        for fd in fds.values():
            os.fdatasync(fd)


flusher = threading.Thread(target=writeback, daemon=True)
flusher.start()
with ThreadPoolExecutor(concurrency) as pool:
    list(pool.map(fetch, sorted(tasks, key=lambda t: (-t[0].size, t[0].ref, t[1]))))  # file by file, largest first
done.set()
due.set()
flusher.join()
for f in files:
    os.fsync(fds[f.ref])
    os.close(fds[f.ref])
    plan = plans[f.ref]
    if plan.finish == s3plans.Finish.REREAD:
        raise RuntimeError(f"{f.ref}: no per-part check offered; this bench expects one")
    if not plan.check(digests[f.ref], f.size):
        raise RuntimeError(f"{f.ref}: checksum mismatch ({plan.label})")
checks = sorted({f"{plans[f.ref].finish.value} {plans[f.ref].algorithm}" for f in files})
print(time.monotonic() - t0, "; ".join(checks))
"""


def run_bare(env: dict[str, str], endpoint: str, dest: Path, concurrency: int, part_size: int) -> dict[str, Any]:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    argv = [sys.executable, "-c", BARE, "bench", str(dest), endpoint, str(concurrency), str(part_size)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"bare client failed: {out.stderr[-2000:]}")
    seconds, checks = out.stdout.strip().split(maxsplit=1)
    return {"reported_seconds": float(seconds), "checks": checks}


def run_naive(env: dict[str, str], endpoint: str, dest: Path) -> dict[str, Any]:
    shutil.rmtree(dest, ignore_errors=True)
    argv = [sys.executable, "-c", base.BASELINE, "bench", str(dest), endpoint, "fsync"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return {"reported_seconds": float(out.stdout.strip())}


def against(
    name: str, endpoint: str, server_cpu: Any, workdir: Path, args: argparse.Namespace, repeats: int
) -> dict[str, Any]:
    """The three clients against one server, interleaved, `repeats` rounds; every run and the medians."""
    env = {**os.environ, **base.CREDENTIALS, **base.IDENTITY, "AWS_ENDPOINT_URL_S3": endpoint}
    root, key = workdir / "nvme", f"bench-{name}"
    flags = ["--concurrency", str(args.concurrency), "--part-size-mb", str(args.part_size_mb)]

    def preload() -> dict[str, Any]:
        shutil.rmtree(root / "warmstart" / "keys" / key, ignore_errors=True)
        return base.run_preload(env, "bench", root, key, flags, workdir)

    def bare() -> dict[str, Any]:
        return run_bare(env, endpoint, workdir / "bare", args.concurrency, args.part_size_mb * MIB)

    def naive() -> dict[str, Any]:
        return run_naive(env, endpoint, workdir / "naive")

    methods = {"preload": preload, "bare": bare, "naive": naive}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for _ in range(repeats):
        for method, fn in methods.items():
            base.settle()
            runs[method].append(base.timed(f"[{name}] {method}", server_cpu, fn) | {"load_avg": os.getloadavg()[0]})
    for path in (root / "warmstart" / "keys" / key, workdir / "bare", workdir / "naive"):
        shutil.rmtree(path, ignore_errors=True)
    medians = {m: sorted(r["reported_seconds"] for r in rs)[len(rs) // 2] for m, rs in runs.items()}
    return {"runs": runs, "median_seconds": medians}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--shard-mb", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--part-size-mb", type=int, default=16)
    p.add_argument("--servers", default="moto,versitygw,file-s3", help="comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="rounds per server; the median of each client is reported")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="warmstart-bench-bare-"))
    os.environ.update(base.CREDENTIALS)
    figures: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "commit": base.git_commit(),
        "niceness": os.nice(0),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_avg_at_start": os.getloadavg(),
        "servers": {},
    }
    try:
        sizes = base.make_model(workdir / "src", args.shards, args.shard_mb * MIB)
        figures["model_bytes"] = sum(sizes.values())
        figures["disk_write_mib_s_with_fsync"] = base.disk_speed(workdir)
        for name in args.servers.split(","):
            if name in ("moto", "versitygw"):
                proc, endpoint = base.start_moto(workdir) if name == "moto" else base.start_versitygw(workdir)
                try:
                    base.upload(endpoint, workdir / "src", sizes)
                    cpu = base.process_cpu(psutil.Process(proc.pid))
                    figures["servers"][name] = against(name, endpoint, cpu, workdir, args, args.repeats)
                finally:
                    proc.terminate()
                    proc.wait()
                    shutil.rmtree(workdir / "vgw", ignore_errors=True)
            elif name == "file-s3":
                served = workdir / "s3files" / "bench" / "model"
                served.mkdir(parents=True, exist_ok=True)
                for file in sizes:
                    if not (served / file).exists():
                        os.link(workdir / "src" / file, served / file)
                server = FileS3Server(str(workdir / "s3files"))
                try:
                    figures["servers"][name] = against(name, server.url, base.own_cpu, workdir, args, args.repeats)
                finally:
                    server.stop()
            else:
                raise SystemExit(f"unknown server {name}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        figures["load_avg_at_end"] = os.getloadavg()
        figures["table"] = table(figures)
        print("\n".join(figures["table"]))
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def table(figures: dict[str, Any]) -> list[str]:
    total = figures.get("model_bytes", 0)
    lines = [
        f"model {total / MIB:.0f} MiB; {figures['cpus']} CPUs; load average {figures['load_avg_at_start'][0]:.1f} at "
        f"start, {figures['load_avg_at_end'][0]:.1f} at end; disk write+fsync "
        f"{figures.get('disk_write_mib_s_with_fsync', 0):.0f} MiB/s",
        f"{'server':<11}{'preload':>13}{'bare':>13}{'naive':>13}{'preload/bare':>14}{'preload/naive':>15}"
        f"{'server CPU (preload)':>22}",
    ]
    for name, got in figures["servers"].items():
        med = got["median_seconds"]
        rate = {m: total / MIB / s for m, s in med.items()}
        runs = got["runs"]["preload"]
        share = sorted(r["server_cpu"] / r["wall"] for r in runs)[len(runs) // 2]
        lines.append(
            f"{name:<11}"
            + "".join(f"{rate[m]:>7.0f} MiB/s" for m in ("preload", "bare", "naive"))
            + f"{rate['preload'] / rate['bare']:>13.2f}x{rate['preload'] / rate['naive']:>14.2f}x{share:>21.0%}"
        )
        for method, rs in got["runs"].items():
            lines.append(f"    {method:<8} runs: " + ", ".join(f"{r['reported_seconds']:.2f}" for r in rs) + " s")
    return lines


if __name__ == "__main__":
    sys.exit(main())
