"""The disk filling up mid-download (another writer took the space after the capacity check): DiskFull, retryable,
and the partial download removed. A real 8 MiB tmpfs stands for the NVMe (mounting needs root: without it the test
fails with mount's error)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import put, s3_source
from warmstart.api import preloading as contract
from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import preloading, store
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Options, open_source

MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (the tests run as root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def roomy(path: str) -> os.statvfs_result:
    """What the capacity check saw: plenty of space (before the other writer filled the disk)."""
    real = os.statvfs(path)
    return os.statvfs_result((*real[:4], 1 << 40, 1 << 40, *real[6:]))


@pytest.mark.parametrize("processes", [1, 2])
def test_disk_full_mid_download_is_retryable_and_leaves_nothing(
    s3: Any, bucket: str, env: dict[str, str], small_disk: Path, processes: int
) -> None:
    put(s3, bucket, "m/a.bin", os.urandom(6 * MIB))
    put(s3, bucket, "m/b.bin", os.urandom(6 * MIB))
    config = ModelSourceConfig.model_validate_json(s3_source(bucket, "m"))
    source = open_source(config, Options(env=env, processes=processes, part_size=2 * MIB))
    lay = store.layout(str(small_disk), "k")
    with pytest.raises(PreloadError) as failed:
        preloading.preload(source, lay, statvfs=roomy, progress_interval=60)
    assert failed.value.reason == Reason.DISK_FULL, failed.value.message
    assert contract.Result(failed.value.reason, failed.value.message).retryable
    assert contract.exit_code(Reason.DISK_FULL) == contract.EXIT_RETRYABLE
    assert "filled up" in failed.value.message
    assert not os.path.lexists(lay.staging) and not os.path.lexists(lay.final)
    assert os.statvfs(small_disk).f_bfree * os.statvfs(small_disk).f_frsize > 7 * MIB  # the space is back
