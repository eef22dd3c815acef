"""Preload tests against real servers: moto's S3 server (a subprocess), a Hub look-alike, local directories.

Sets up: one moto S3 server for the session (each test gets its own bucket), a Hub-protocol HTTP server
(`preloadhub.py`) for the session, and the AWS/HF environment pointing at them. `preloadhelpers.py` runs
`warmstart preload` in-process (its real `main`) or as a subprocess (for kill -9). Not faked: boto3,
s3transfer, huggingface_hub, HTTP, the file system, fsync, rename and flock. Faults are injected from outside
only: moto's own IAM checks, a byte-flipping proxy, a Hub server serving a corrupt file. No test asserts on time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from preloadhub import HubServer
from preloadservers import CREDENTIALS, MotoServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "large: moves a few hundred MB through the real S3 server (select with -m large)"
    )


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hub() -> Iterator[HubServer]:
    server = HubServer().start()
    yield server
    server.stop()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, moto: MotoServer, hub: HubServer) -> dict[str, str]:
    values = {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": moto.url, "HF_ENDPOINT": hub.url}
    for name in (
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "HF_TOKEN",
        "AWS_JUMPSTART_CONTENT_BUCKET_OVERRIDE",
        "AWS_JUMPSTART_GATED_CONTENT_BUCKET_OVERRIDE",
        "WARMSTART_JUMPSTART_BUCKET",
    ):
        monkeypatch.delenv(name, raising=False)
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


@pytest.fixture
def s3(env: dict[str, str], moto: MotoServer) -> Any:
    return boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "nvme"
    path.mkdir()
    return path
