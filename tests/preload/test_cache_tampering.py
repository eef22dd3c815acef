"""Hostile shapes of the cache and of a source end in a clear, specific outcome, never in another tenant's bytes.

- A local (PVC/FSx) source file swapped after the listing, for a link to another namespace's cached file with the
  same size and mtime, is refused (PathEscape): each file is opened with O_NOFOLLOW and must be the very file listed.
- A manifest nested deeper than the JSON parser goes is a corrupt cache (downloaded again), not a RecursionError.
- A source holding both `a` and `a/b` is InvalidSource, with both names in the message.
- Something root-owned at warmstart's own names (a directory where the lock file goes, a `weights/` the preload's
  uid cannot write) is the retryable CacheTampered, not a permanent InternalError.

Real file system and real moto S3; the swap runs between the real listing and the real copy.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, preload, put, s3_source
from warmstart.api import preloading as contract
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import cli, preloading, store
from warmstart.preload.results import PreloadError
from warmstart.preload.sources import Listing, Options, volume

PVC = {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "m"}, "modelLocation": "m"}


class SwapAfterListing:
    """The real local source; the attacker's swap happens right after its listing, before any byte is copied."""

    def __init__(self, inner: Any, swap: Any) -> None:
        self.inner, self.swap = inner, swap

    def listing(self) -> Listing:
        listed: Listing = self.inner.listing()
        self.swap()
        return listed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another namespace's cached weights on the same node."""
    path = tmp_path / "nvme" / "warmstart" / "keys" / "victim-key" / "model" / "model.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"VICTIM WEIGHTS " * 100)
    return path


def _attack(tmp_path: Path, victim: Path, swap: str) -> tuple[Path, Any]:
    mount = tmp_path / "mnt"
    mine = mount / "m" / "model.bin"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"x" * victim.stat().st_size)  # same size and mtime as the victim: the old checks pass
    st = victim.stat()
    os.utime(mine, ns=(st.st_atime_ns, st.st_mtime_ns))

    def do_swap() -> None:
        mine.unlink()
        if swap == "link":
            mine.symlink_to(victim)
        else:  # another regular file, renamed over the listed one
            other = mount / "m" / ".other"
            shutil.copyfile(victim, other)
            os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.rename(other, mine)

    source = volume.source(ModelSourceConfig.model_validate(PVC), Options(mount_root=str(mount)))
    return mine, SwapAfterListing(source, do_swap)


@pytest.mark.parametrize("swap", ["link", "file"])
def test_a_source_file_swapped_after_the_listing_is_refused_not_copied(tmp_path: Path, victim: Path, swap: str) -> None:
    _, source = _attack(tmp_path, victim, swap)
    lay = store.layout(str(tmp_path / "nvme"), "attacker-key")
    with pytest.raises(PreloadError) as refused:
        preloading.preload(source, lay)
    assert refused.value.reason == contract.Reason.PATH_ESCAPE
    assert "model.bin" in refused.value.message and "listing" in refused.value.message
    assert not os.path.exists(lay.final)
    staged = Path(lay.staging)
    leaked = [p for p in staged.rglob("*") if p.is_file() and b"VICTIM" in p.read_bytes()] if staged.exists() else []
    assert not leaked


def test_a_deeply_nested_manifest_is_a_corrupt_cache(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a")
    final = cache_dir(root, "k")
    final.mkdir(parents=True)
    (final / "a.bin").write_bytes(b"a")
    (final / store.MANIFEST_NAME).write_text("[" * 200_000 + "]" * 200_000)
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "k", "--if-missing", root=root)
    assert (code, result["reason"]) == (0, "Downloaded"), result
    assert json.loads((final / store.MANIFEST_NAME).read_text())["key"] == "k"


def test_a_file_and_a_directory_of_the_same_name_is_a_clear_invalid_source(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a", b"file a")
    put(s3, bucket, "m/a/b", b"file a/b")
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "k", root=root)
    assert (code, result["reason"]) == (64, "InvalidSource"), result
    assert "'a'" in result["message"] and "'a/b'" in result["message"]


def test_a_directory_planted_where_the_lock_goes_is_retryable_cache_tampered(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a")
    (root / "warmstart" / "keys" / "k" / ".lock" / "planted").mkdir(parents=True)
    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "k", root=root)
    assert (code, result["reason"], result["retryable"]) == (75, "CacheTampered", True), result
    assert "k/.lock" in result["message"] and "owned by uid 0" in result["message"]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory another uid can reach (pytest's own tmp_path lies under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="warmstart-tamper-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a root-owned directory and to run as uid 65532")
def test_a_root_owned_keys_directory_is_retryable_cache_tampered_for_the_non_root_preload(
    env: dict[str, str], bucket: str, s3: Any, shared_tmp: Path
) -> None:
    """As in a pod: the preload runs as 65532 in a `warmstart/` it owns; root planted `keys/` there."""
    put(s3, bucket, "m/a.bin", b"a")
    tmp_path = shared_tmp
    root = tmp_path / "nvme"
    (root / "warmstart" / "keys").mkdir(parents=True)
    os.chown(root / "warmstart", 65532, 65532)
    tlog = tmp_path / "tlog"
    tlog.touch()
    os.chown(tlog, 65532, 65532)
    args = ["--source-json", s3_source(bucket, "m"), "--key", "k", "--root", str(root), "--termination-log", str(tlog)]
    pid = os.fork()  # the interpreter's own files are under root's 0700 home: drop to 65532 in a fork, not an exec
    if pid == 0:
        code = 70
        try:
            os.setgroups([])
            os.setgid(65532)
            os.setuid(65532)
            code = cli.main(args)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    result = json.loads(tlog.read_text())
    assert (os.waitstatus_to_exitcode(status), result["reason"]) == (75, "CacheTampered"), result
    assert (
        "keys" in result["message"] and "owned by uid 0 that the preload's uid 65532 cannot write" in result["message"]
    )
