"""Benchmark `warmstart preload` against the naive baseline and the local-copy limit, its resume, and `--if-missing`.

One run: a synthetic model (3 x 300 MiB shards + small files) is written to a local directory and
served by up to four S3 servers in turn: moto's server and versitygw (the S3 server of the real-node cluster, built
by localcluster into ~/.cache/warmstart/bin), each a subprocess with the model uploaded by boto3; and
`preload_s3server.py` (a fast file-backed server, in this process) with MD5 ETags only, then with CRC64NVME
checksums as S3 gives new objects. Against each server, into the same disk:

  1. `warmstart preload` (its own process; parallel ranged GETs, verification, fsync, atomic publish);
  2. boto3 `download_file` called sequentially per object, with fsync (the naive baseline, boto3 defaults);
  3. a preload killed -9 at 10%, 25%, 40%, 50% and 75% of the clean run's time (`--kill-points`), each followed
     by the resume, timed against a clean run made just before it next to (1 - the fraction on disk at the kill),
     with the bytes it kept and its fetch throughput, the median of `--resume-repeats` trials with the spread and
     the load average (`preload_resume.py`).

Then a plain local copy with fsync (the loopback/disk limit), both in the kernel (`copy_file_range`, what
`shutil.copyfile` does) and through user space (read into a buffer, `pwrite`: the best any downloader can do),
the CPU seconds per GiB of each verification method,
and `--if-missing` on a complete cache and on a synthetic 100 GB one. Servers' CPU time during each transfer is
reported, so a reader can tell when the server, not the client, is the bottleneck. Everything written is removed.

    .venv/bin/python bench/preload.py [--shard-mb 300] [--shards 3] [--servers moto,versitygw,file-s3,file-s3-crc64]
        [--resume-only] [--kill-points 0.1,0.25,0.4,0.5,0.75] [--resume-repeats N] [--json bench/results/<date>-x.json]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import psutil
from boto3.s3.transfer import TransferConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preload_resume
from preload_s3server import FileS3Server

MIB = 1 << 20
GB = 1_000_000_000
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
#: The identity a preload records as the cache's producer: `--if-missing` of the same identity needs no source.
IDENTITY = {"WARMSTART_POD_NAMESPACE": "bench", "WARMSTART_POD_SERVICE_ACCOUNT": "bench"}
VERSITYGW = Path.home() / ".cache" / "warmstart" / "bin" / "versitygw-v1.8.0" / "versitygw"  # localcluster builds it
CHECKSUMS = ("MD5", "SHA256", "SHA1", "CRC32", "CRC32C", "CRC64NVME")


def git_commit() -> str:
    """The commit the bench runs on, with "+dirty" when the work tree has changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    run = lambda *a: subprocess.run(["git", *a], cwd=here, capture_output=True, text=True).stdout.strip()  # noqa: E731
    return run("rev-parse", "HEAD") + ("+dirty" if run("status", "--porcelain", "--untracked-files=no") else "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, **CREDENTIALS, "TMPDIR": str(workdir)}  # moto spills object bodies to temp files here
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/moto-api/")
            conn.getresponse().read()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto did not start")


def start_versitygw(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """versitygw (the S3 server of the real-node cluster) with its posix backend in `workdir/vgw`, on loopback."""
    port = free_port()
    data = workdir / "vgw"
    data.mkdir()
    env = {
        **os.environ,
        "ROOT_ACCESS_KEY_ID": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "ROOT_SECRET_ACCESS_KEY": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    argv = [str(VERSITYGW), f"--port=127.0.0.1:{port}", "--region=us-east-1", "--health=/health", "posix", str(data)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            conn.getresponse().read()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("versitygw did not start")


def make_model(src: Path, shards: int, shard_bytes: int) -> dict[str, int]:
    """Shards of varied (not constant) content, plus the small files a real model has."""
    src.mkdir(parents=True)
    block = os.urandom(4 * MIB)
    sizes = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        with open(src / name, "wb") as f:
            left = shard_bytes
            n = 0
            while left:
                chunk = block[: min(left, len(block))]
                f.write(hashlib.sha256(f"{i}-{n}".encode()).digest() + chunk[32:])
                left -= len(chunk)
                n += 1
        sizes[name] = shard_bytes
    small = {
        "config.json": 2_000,
        "generation_config.json": 200,
        "tokenizer.json": 9 * MIB,
        "tokenizer_config.json": 50_000,
        "special_tokens_map.json": 500,
        "model.safetensors.index.json": 30_000,
        "README.md": 10_000,
        "LICENSE": 7_000,
    }
    for name, size in small.items():
        (src / name).write_bytes(os.urandom(size))
        sizes[name] = size
    return sizes


def client_cpu() -> float:
    """CPU seconds of this process and its finished children (the preload and the baseline run as children)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(label: str, server_cpu: Any, fn: Any) -> dict[str, Any]:
    cpu0, client0, t0 = server_cpu(), client_cpu(), time.monotonic()
    extra = fn() or {}
    wall, cpu, client = time.monotonic() - t0, server_cpu() - cpu0, client_cpu() - client0
    return {
        "label": label,
        "wall": wall,
        "server_cpu": cpu,
        "client_cpu": client - cpu if server_cpu is own_cpu else client,
        **extra,
    }


def own_cpu() -> float:
    """CPU seconds of this process: the file-s3 server runs here."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def process_cpu(proc: psutil.Process) -> Any:
    def seconds() -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    return seconds


def run_preload(
    env: dict[str, str], bucket: str, root: Path, key: str, args: list[str], workdir: Path
) -> dict[str, Any]:
    tlog = workdir / f"tlog-{key}"
    t0 = time.monotonic()
    proc = subprocess.run(preload_argv(bucket, root, key, tlog, args), env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    result = json.loads(tlog.read_text())
    if proc.returncode != 0:
        raise RuntimeError(f"preload failed: {result}\n{proc.stderr[-2000:]}")
    return {
        "reported_seconds": result["seconds"],
        "process_wall_seconds": round(wall, 3),
        "reason": result["reason"],
        "kept": result.get("kept", 0),
        "message": result["message"],
    }


BASELINE = """
import os, sys, time, boto3
bucket, dest, endpoint, fsync = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint)
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="model/")
keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
t0 = time.monotonic()
for k in keys:
    path = os.path.join(dest, k[len("model/"):])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    s3.download_file(bucket, k, path)
    if fsync == "fsync":  # durable, as the preload and the copy are
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
print(time.monotonic() - t0)
"""


def copy_tree(src: Path, dst: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    for path in sorted(src.rglob("*")):
        if path.is_file():
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            fd = os.open(target, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return {"reported_seconds": time.monotonic() - t0}


def copy_tree_user_space(src: Path, dst: Path) -> dict[str, Any]:
    """The copy a downloader can do at best: bytes through user space (readinto one buffer, pwrite), then fsync.

    `shutil.copyfile` (the other limit) copies inside the kernel (copy_file_range), a path no network download has."""
    t0 = time.monotonic()
    view = memoryview(bytearray(MIB))
    for path in sorted(src.rglob("*")):
        if path.is_file():
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            fin, fout = os.open(path, os.O_RDONLY), os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            offset = 0
            while n := os.readv(fin, [view]):
                offset += os.pwrite(fout, view[:n], offset)
            os.fsync(fout)
            os.close(fin)
            os.close(fout)
    return {"reported_seconds": time.monotonic() - t0}


def disk_speed(workdir: Path) -> float:
    """What the disk takes durably right now (256 MiB written and fsynced): the floor every method shares."""
    path = workdir / "ddtest"
    t0 = time.monotonic()
    with open(path, "wb") as f:
        block = os.urandom(4 * MIB)
        for _ in range(64):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.monotonic() - t0
    path.unlink()
    return 256 / seconds


def sparse_cache(root: Path, key: str, total: int, files: int) -> None:
    final = root / "warmstart" / "keys" / key / "model"
    final.mkdir(parents=True)
    entries = []
    size = total // files
    for i in range(files):
        name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        with open(final / name, "wb") as f:
            f.truncate(size)
        entries.append({"path": name, "size": size, "etag": "0" * 32 + f"-{size // (16 * MIB) + 1}"})
    manifest = {
        "formatVersion": 1,
        "key": key,
        "source": {"type": "s3"},
        "completedAt": "2026-01-01T00:00:00Z",
        "totalBytes": size * files,
        "files": entries,
        "producer": {
            "namespace": IDENTITY["WARMSTART_POD_NAMESPACE"],
            "serviceAccount": IDENTITY["WARMSTART_POD_SERVICE_ACCOUNT"],
        },
    }
    (final / ".warmstart-manifest.json").write_text(json.dumps(manifest))


def if_missing(env: dict[str, str], root: Path, key: str, workdir: Path, repeats: int = 5) -> dict[str, Any]:
    """Median in-process time (from the termination message) and median process wall time of `--if-missing`."""
    inproc, walls = [], []
    for _ in range(repeats):
        t0 = time.monotonic()
        out = run_preload(env, "unused-bucket", root, key, ["--if-missing"], workdir)
        walls.append(time.monotonic() - t0)
        assert out["reason"] == "AlreadyPresent", out
        inproc.append(out["reported_seconds"])
    return {
        "in_process_ms": 1000 * sorted(inproc)[len(inproc) // 2],
        "process_wall_ms": 1000 * sorted(walls)[len(walls) // 2],
    }


def checksum_cpu(mib: int = 256) -> dict[str, float]:
    """CPU seconds per GiB of each verification method over `mib` MiB in 8 MiB chunks (one core, GIL released)."""
    from warmstart.preload import partdigests

    block = os.urandom(8 * MIB)
    out = {}
    for algorithm in CHECKSUMS:
        new = partdigests.hasher(algorithm)
        if new is None:
            continue
        h = new()
        t0 = time.process_time()
        for _ in range(mib // 8):
            h.update(block)
        h.digest()
        out[algorithm] = (time.process_time() - t0) * 1024 / mib
    return out


def preload_argv(bucket: str, root: Path, key: str, tlog: Path, args: list[str]) -> list[str]:
    source = json.dumps(
        {"modelSourceType": "s3", "s3Storage": {"bucketName": bucket, "region": "us-east-1"}, "modelLocation": "model"}
    )
    return [
        sys.executable,
        "-m",
        "warmstart.cli",
        "preload",
        "--source-json",
        source,
        "--key",
        key,
        "--root",
        str(root),
        "--termination-log",
        str(tlog),
        "--progress-interval",
        "5",
        *args,
    ]


def compare(
    name: str,
    endpoint: str,
    server_cpu: Any,
    root: Path,
    workdir: Path,
    args: argparse.Namespace,
    repeats: int,
    total: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """warmstart preload, the naive baseline, and the resume after a kill -9 at each kill point, against one server."""
    env = {**os.environ, **CREDENTIALS, **IDENTITY, "AWS_ENDPOINT_URL_S3": endpoint}
    key = f"bench-{name}"
    baseline_dir = workdir / f"baseline-{name}"
    flags = ["--concurrency", str(args.concurrency), "--part-size-mb", str(args.part_size_mb)]

    def ours() -> dict[str, Any]:
        shutil.rmtree(root / "warmstart" / "keys" / key, ignore_errors=True)
        return run_preload(env, "bench", root, key, flags, workdir)

    def baseline() -> dict[str, Any]:
        shutil.rmtree(baseline_dir, ignore_errors=True)
        out = subprocess.run(
            [sys.executable, "-c", BASELINE, "bench", str(baseline_dir), endpoint, "fsync"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return {"reported_seconds": float(out.stdout.strip())}

    runs = [median(f"[{name}] warmstart preload", server_cpu, ours, repeats)]
    if not args.resume_only:
        runs.append(median(f"[{name}] boto3 download_file seq. + fsync", server_cpu, baseline, repeats))
        shutil.rmtree(baseline_dir)
    weights = root / "warmstart" / "keys"
    points = preload_resume.trials(
        [float(f) for f in args.kill_points.split(",") if f],
        args.resume_repeats or repeats,
        ours,
        preload_argv("bench", root, key, workdir / f"tlog-kill-{key}", flags),
        env,
        weights,
        key,
        total,
        lambda: run_preload(env, "bench", root, key, flags, workdir),
        args.concurrency,
        args.settle_after_kill,
    )
    summary = {
        "clean_seconds": runs[0]["reported_seconds"],
        "clean_wall_seconds": runs[0]["process_wall_seconds"],
        "clean_fetch_mib_s": round((preload_resume.fetch_rate(runs[0]["message"]) or 0.0) / MIB, 1),
        "clean_runs": runs[0]["all_seconds"],
    }
    return runs, {**summary, "kill_points": points}


def median(label: str, server_cpu: Any, fn: Any, repeats: int) -> dict[str, Any]:
    """The run with the median time of `repeats` (the machine is shared: single runs are noisy)."""
    tries = sorted((timed(label, server_cpu, fn) for _ in range(repeats)), key=lambda r: r["reported_seconds"])
    best = dict(tries[len(tries) // 2])
    best["all_seconds"] = [round(t["reported_seconds"], 2) for t in tries]
    return best


def settle() -> float:
    """Write back what the setup left dirty (the model, the server's copy of it); the seconds it took.

    Without it the first runs timed (the preload's, before the baseline's) share the disk with gigabytes of
    writeback, and every fsync they make waits behind it."""
    t0 = time.monotonic()
    os.sync()
    return time.monotonic() - t0


def upload(endpoint: str, src: Path, sizes: dict[str, int]) -> float:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="bench")
    config = TransferConfig(multipart_threshold=16 * MIB, multipart_chunksize=16 * MIB, max_concurrency=4)
    t0 = time.monotonic()
    for name in sizes:
        s3.upload_file(str(src / name), "bench", f"model/{name}", Config=config)
    return time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shards", type=int, default=3)
    p.add_argument("--shard-mb", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--part-size-mb", type=int, default=16)
    p.add_argument("--workdir", default=None, help="where the temporary data goes (default: a new temp dir)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--servers", default="moto,versitygw,file-s3,file-s3-crc64", help="comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="runs per method; the median is reported")
    p.add_argument(
        "--moto-repeats", type=int, default=1, help="runs per method against moto (its baseline takes minutes)"
    )
    p.add_argument(
        "--kill-points",
        default="0.1,0.25,0.4,0.5,0.75",
        help="fractions of the clean run's time at which a run is killed ('': none)",
    )
    p.add_argument("--resume-repeats", type=int, default=0, help="trials per kill point (default: --repeats)")
    p.add_argument(
        "--settle-after-kill", action="store_true", help="write back the killed run's dirty pages before the resume"
    )
    p.add_argument(
        "--resume-only", action="store_true", help="only the clean runs and the resumes (no baseline, copies, ...)"
    )
    args = p.parse_args()
    servers = args.servers.split(",")

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="warmstart-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.update(CREDENTIALS)
    figures: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "commit": git_commit(),
        "niceness": os.nice(0),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_avg_at_start": os.getloadavg(),
        "uptime_at_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    if not args.resume_only:
        figures["checksum_cpu_s_per_gib"] = checksum_cpu()
    runs: list[dict[str, Any]] = []
    resumes: dict[str, dict[str, Any]] = {}
    try:
        sizes = make_model(workdir / "src", args.shards, args.shard_mb * MIB)
        total = figures["model_bytes"] = sum(sizes.values())
        figures["model_settle_seconds"] = settle()
        figures["disk_write_mib_s_with_fsync"] = disk_speed(workdir)
        root = workdir / "nvme"
        for name in [s for s in servers if s in ("moto", "versitygw")]:
            proc, endpoint = start_moto(workdir) if name == "moto" else start_versitygw(workdir)
            try:
                figures[f"{name}_upload_seconds"] = upload(endpoint, workdir / "src", sizes)
                figures[f"{name}_settle_seconds"] = settle()
                repeats = args.moto_repeats if name == "moto" else args.repeats
                got, resumes[name] = compare(
                    name, endpoint, process_cpu(psutil.Process(proc.pid)), root, workdir, args, repeats, total
                )
                runs += got
            finally:
                proc.terminate()
                proc.wait()
            shutil.rmtree(root / "warmstart" / "keys" / f"bench-{name}", ignore_errors=True)
            shutil.rmtree(workdir / "vgw", ignore_errors=True)
        served = workdir / "s3files" / "bench" / "model"
        served.mkdir(parents=True)
        for name in sizes:
            os.link(workdir / "src" / name, served / name)  # the same bytes, no extra disk
        for name in [s for s in servers if s.startswith("file-s3")]:
            files_server = FileS3Server(str(workdir / "s3files"), checksums=name.endswith("crc64"))
            try:
                got, resumes[name] = compare(name, files_server.url, own_cpu, root, workdir, args, args.repeats, total)
                runs += got
            finally:
                files_server.stop()

        figures["resume"] = resumes
        if args.resume_only:
            figures["runs"] = runs
            return 0

        def copy() -> dict[str, Any]:
            shutil.rmtree(workdir / "copy", ignore_errors=True)
            return copy_tree(workdir / "src", workdir / "copy")

        def user_copy() -> dict[str, Any]:
            shutil.rmtree(workdir / "copy", ignore_errors=True)
            return copy_tree_user_space(workdir / "src", workdir / "copy")

        runs.append(median("local copy + fsync (limit)", lambda: 0.0, copy, args.repeats))
        runs.append(median("local copy via user space + fsync (limit)", lambda: 0.0, user_copy, args.repeats))
        shutil.rmtree(workdir / "copy")
        for run in runs:
            run["throughput_mib_s"] = total / MIB / run["reported_seconds"]
            run["server_cpu_share"] = run["server_cpu"] / run["wall"]
            run["client_cpu_s_per_gib"] = run["client_cpu"] / (total / (1 << 30))
        figures["runs"] = runs
        by = {r["label"]: r["throughput_mib_s"] for r in runs}
        copy_rate = by["local copy + fsync (limit)"]
        user_copy_rate = by["local copy via user space + fsync (limit)"]
        figures["ratios"] = {
            server: {
                "vs_baseline": by[f"[{server}] warmstart preload"] / by[f"[{server}] boto3 download_file seq. + fsync"],
                "vs_copy": by[f"[{server}] warmstart preload"] / copy_rate,
                "vs_user_space_copy": by[f"[{server}] warmstart preload"] / user_copy_rate,
            }
            for server in resumes
        }
        env = {**os.environ, **CREDENTIALS, **IDENTITY}
        kept = [f"bench-{s}" for s in resumes if (root / "warmstart" / "keys" / f"bench-{s}" / "model").is_dir()]
        if kept:  # moto's and versitygw's caches are removed with their servers
            figures["if_missing_small"] = if_missing(env, root, kept[-1], workdir)
        shutil.rmtree(workdir / "s3files")
        shutil.rmtree(workdir / "src")
        sparse_cache(root, "sparse-100gb", 100 * GB, 50)
        figures["if_missing_100gb_sparse"] = if_missing(env, root, "sparse-100gb", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        figures["load_avg_at_end"] = os.getloadavg()
        figures["uptime_at_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        report(figures, args)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    total = figures.get("model_bytes", 0)
    if not total:
        return
    print(
        f"model: {figures['model_bytes'] / MIB:.0f} MiB in {args.shards} shards + small files; "
        f"{figures['cpus']} CPUs, load average at start {figures['load_avg_at_start'][0]:.1f} (shared machine); "
        f"--concurrency {args.concurrency} --part-size-mb {args.part_size_mb}; "
        f"disk write+fsync {figures.get('disk_write_mib_s_with_fsync', 0):.0f} MiB/s"
    )
    settles = {k.removesuffix("_settle_seconds"): v for k, v in figures.items() if k.endswith("_settle_seconds")}
    if settles:
        print("writeback of the setup before timing: " + ", ".join(f"{k} {v:.2f} s" for k, v in settles.items()))
    if "checksum_cpu_s_per_gib" in figures:
        print(
            "verification CPU, s/GiB (one core): "
            + ", ".join(f"{k} {v:.2f}" for k, v in figures["checksum_cpu_s_per_gib"].items())
        )
    print(f"{'method':<46}{'seconds':>9}{'MiB/s':>9}{'server CPU':>12}{'client CPU s/GiB':>18}")
    for run in figures.get("runs", []):
        print(
            f"{run['label']:<46}{run['reported_seconds']:>9.2f}{total / MIB / run['reported_seconds']:>9.0f}"
            f"{run['server_cpu'] / run['wall']:>11.0%}{run['client_cpu'] / (total / (1 << 30)):>18.1f}"
            f"   (runs: {', '.join(map(str, run['all_seconds']))} s)"
        )
    for server, r in figures.get("ratios", {}).items():
        print(
            f"[{server}] preload vs naive baseline + fsync: {r['vs_baseline']:.2f}x; vs local copy limit: "
            f"{r['vs_copy']:.0%} (in-kernel), {r['vs_user_space_copy']:.0%} (user space)"
        )
    for server, resume in figures.get("resume", {}).items():
        print("\n".join(preload_resume.report(server, resume["kill_points"])))
    for name in [n for n in ("if_missing_small", "if_missing_100gb_sparse") if n in figures]:
        f = figures[name]
        print(
            f"--if-missing on the {name[11:]} cache: {f['in_process_ms']:.1f} ms in process, "
            f"{f['process_wall_ms']:.0f} ms including interpreter start"
        )


if __name__ == "__main__":
    sys.exit(main())
