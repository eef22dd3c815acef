"""Synthetic models in the local cluster's S3 server: a few weight files of pseudo-random bytes and a config.json.

The bytes are not compressible and not all zero (a server or file system cannot shortcut them), and the same
name, size and seed always give the same content, so an upload that finds every object at its size skips it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import time
from collections.abc import Iterator

from botocore.exceptions import ClientError

from warmstart.localcluster import objectstore

logger = logging.getLogger(__name__)

_BLOCK = 4 * 1024 * 1024
_PART = 64 * 1024 * 1024
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class SyntheticModel:
    """Where a synthetic model lives in the S3 server, and what it holds."""

    bucket: str
    prefix: str
    files: dict[str, int]
    """``{file name: size in bytes}``, config.json included."""

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())


def layout(total_bytes: int, shards: int) -> dict[str, int]:
    """``shards`` equal safetensors files adding up to ``total_bytes`` (the last one takes the remainder)."""
    if shards < 1 or total_bytes < shards:
        raise ValueError("need at least one shard and one byte per shard")
    each = total_bytes // shards
    sizes = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": each for i in range(shards)}
    last = f"model-{shards:05d}-of-{shards:05d}.safetensors"
    sizes[last] += total_bytes - each * shards
    return sizes


def _block(name: str) -> bytes:
    """A 4 MiB pseudo-random block seeded by the file name (SHAKE-256: fast, deterministic)."""
    return hashlib.shake_256(name.encode()).digest(_BLOCK)


def chunks(name: str, size: int, chunk: int = _PART) -> Iterator[bytes]:
    """The content of file ``name`` of ``size`` bytes, ``chunk`` bytes at a time (the same bytes for any ``chunk``)."""
    block = _block(name)
    offset = 0
    while offset < size:
        take = min(chunk, size - offset)
        start = offset % len(block)
        yield (block[start:] + block * (take // len(block) + 1))[:take]
        offset += take


def upload(server: objectstore.Endpoint, bucket: str, prefix: str, total_bytes: int, shards: int = 4) -> SyntheticModel:
    """Put a synthetic model of about ``total_bytes`` under ``s3://bucket/prefix/`` (skipping objects already there)."""
    objectstore.create_bucket(server, bucket)
    s3 = server.client()
    files = layout(total_bytes, shards)
    config = json.dumps({"architectures": ["WarmstartSynthetic"], "total_bytes": total_bytes}).encode()
    started, uploaded = time.monotonic(), 0
    for name, size in files.items():
        key = f"{prefix.strip('/')}/{name}"
        if _size(s3, bucket, key) == size:
            continue
        uploaded += size
        upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        parts = []
        for number, data in enumerate(chunks(name, size), start=1):
            etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)["ETag"]
            parts.append({"ETag": etag, "PartNumber": number})
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
    s3.upload_fileobj(io.BytesIO(config), bucket, f"{prefix.strip('/')}/config.json")
    seconds = time.monotonic() - started
    logger.info("model s3://%s/%s: %d of %d bytes uploaded in %.1f s", bucket, prefix, uploaded, total_bytes, seconds)
    return SyntheticModel(bucket=bucket, prefix=prefix.strip("/"), files={**files, "config.json": len(config)})


def _size(s3: object, bucket: str, key: str) -> int | None:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
    except ClientError:
        return None
    return int(head["ContentLength"])
