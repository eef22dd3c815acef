"""Helpers for the preload tests: uploading like a real client, running `warmstart preload`, hashing trees."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from warmstart.preload import cli


def put(s3: Any, bucket: str, key: str, data: bytes, part_size: int | None = None) -> None:
    """Upload like a real client: multipart with `part_size` when given (the ETag then ends in -N)."""
    if part_size is None:
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        return
    config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size)
    s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=config)


def s3_source(bucket: str, location: str) -> str:
    return json.dumps(
        {"modelSourceType": "s3", "s3Storage": {"bucketName": bucket, "region": "us-east-1"}, "modelLocation": location}
    )


def preload(*args: str, root: Path, tlog: Path | None = None) -> tuple[int, dict[str, Any]]:
    """Run `warmstart preload` in-process; returns the exit code and the termination message."""
    tlog = tlog or root.parent / f"termination-log-{uuid.uuid4().hex[:6]}"
    code = cli.main([*args, "--root", str(root), "--termination-log", str(tlog), "--progress-interval", "1"])
    message = json.loads(tlog.read_text())
    return code, message


def preload_process(*args: str, root: Path, env: dict[str, str], tlog: Path) -> subprocess.Popen[bytes]:
    """Start `warmstart preload` as its own process (so a test can SIGKILL it)."""
    argv = [
        sys.executable,
        "-m",
        "warmstart.cli",
        "preload",
        *args,
        "--root",
        str(root),
        "--termination-log",
        str(tlog),
        "--progress-interval",
        "1",
    ]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def cache_dir(root: Path, key: str) -> Path:
    return root / "warmstart" / "keys" / key / "model"


def tree_digests(path: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under path, the manifest excluded."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_file() and p.name != ".warmstart-manifest.json":
            out[p.relative_to(path).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())}
