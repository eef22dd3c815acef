"""S3 through moto's real server: multi-file models, one object, ranged large files, multipart ETags, --if-missing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, digests, preload, put, s3_source, tree_digests
from warmstart.api import cachemanifests
from warmstart.preload import store

MIB = 1 << 20


def model_files() -> dict[str, bytes]:
    return {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer/tokenizer.json": os.urandom(300_000),
        "model-00001-of-00002.safetensors": os.urandom(12 * MIB + 123),
        "model-00002-of-00002.safetensors": os.urandom(7 * MIB),
        "empty.txt": b"",
    }


def test_multi_file_model_is_published_whole_with_a_manifest(s3: Any, bucket: str, root: Path) -> None:
    files = model_files()
    for name, data in files.items():
        put(s3, bucket, f"llama/{name}", data, part_size=5 * MIB if len(data) > 5 * MIB else None)
    s3.put_object(Bucket=bucket, Key="llama/", Body=b"")  # a console-made "directory" marker is skipped
    s3.put_object(Bucket=bucket, Key="llama-other/x.bin", Body=b"not part of the model")

    code, result = preload(
        "--source-json",
        s3_source(bucket, "llama"),
        "--key",
        "llama-8b",
        "--concurrency",
        "4",
        "--part-size-mb",
        "5",
        root=root,
    )

    assert (code, result["outcome"], result["reason"]) == (0, "Succeeded", "Downloaded")
    assert result["files"] == len(files) and result["bytes"] == sum(map(len, files.values()))
    assert result["retryable"] is False and result["kept"] == 0  # nothing of an interrupted run to keep
    final = cache_dir(root, "llama-8b")
    assert tree_digests(final) == digests(files)
    manifest = json.loads((final / store.MANIFEST_NAME).read_text())
    assert manifest["key"] == "llama-8b" and manifest["totalBytes"] == result["bytes"]
    assert manifest["source"] == {"type": "s3", "bucket": bucket, "location": "llama", "region": "us-east-1"}
    assert {f["path"] for f in manifest["files"]} == set(files)
    multipart = {f["path"]: f["etag"] for f in manifest["files"] if "-" in f["etag"]}
    assert multipart == {
        "model-00001-of-00002.safetensors": multipart["model-00001-of-00002.safetensors"],
        "model-00002-of-00002.safetensors": multipart["model-00002-of-00002.safetensors"],
    }
    assert multipart["model-00001-of-00002.safetensors"].endswith("-3")
    leftovers = sorted(p.name for p in (root / "warmstart" / "keys" / "llama-8b").iterdir())
    assert leftovers == [".lock", "model"]


def test_multipart_etag_with_a_part_size_other_than_ours_verifies(s3: Any, bucket: str, root: Path) -> None:
    data = os.urandom(21 * MIB + 7)
    put(s3, bucket, "m/weights.bin", data, part_size=8 * MIB)  # uploaded in 8 MiB parts, fetched in 5 MiB ranges

    code, result = preload(
        "--source-json", s3_source(bucket, "m/"), "--key", "odd-parts", "--part-size-mb", "5", root=root
    )

    assert (code, result["reason"]) == (0, "Downloaded")
    assert (cache_dir(root, "odd-parts") / "weights.bin").read_bytes() == data


def test_a_single_object_location_caches_that_one_file(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "packed/model.safetensors", b"w" * 1000)
    put(s3, bucket, "packed/model.safetensors.bak", b"other")

    code, result = preload("--source-json", s3_source(bucket, "packed/model.safetensors"), "--key", "one", root=root)

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 1)
    assert sorted(p.name for p in cache_dir(root, "one").iterdir()) == [store.MANIFEST_NAME, "model.safetensors"]


def test_if_missing_returns_at_once_on_a_complete_cache(
    s3: Any, bucket: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made by this same pod identity: no source is contacted (another identity re-checks, test_cache_isolation)."""
    monkeypatch.setenv(cachemanifests.NAMESPACE_ENV, "team-a")
    monkeypatch.setenv(cachemanifests.SERVICE_ACCOUNT_ENV, "default")
    put(s3, bucket, "m/a.bin", b"a" * 100)
    assert preload("--source-json", s3_source(bucket, "m"), "--key", "warm", root=root)[0] == 0
    s3.delete_object(Bucket=bucket, Key="m/a.bin")  # the source is not contacted any more

    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "warm", "--if-missing", root=root)

    assert (code, result["reason"], result["bytes"], result["files"]) == (0, "AlreadyPresent", 100, 1)


def test_a_rerun_without_if_missing_compares_the_listing_and_keeps_the_cache(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a" * 100)
    assert preload("--source-json", s3_source(bucket, "m"), "--key", "same", root=root)[0] == 0

    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "same", root=root)

    assert (code, result["reason"]) == (0, "AlreadyPresent")


def test_a_cache_whose_file_went_missing_is_not_complete(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a" * 100)
    put(s3, bucket, "m/b.bin", b"b" * 100)
    assert preload("--source-json", s3_source(bucket, "m"), "--key", "holed", root=root)[0] == 0
    (cache_dir(root, "holed") / "b.bin").unlink()

    code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "holed", "--if-missing", root=root)

    assert (code, result["reason"]) == (0, "Downloaded")
    assert (cache_dir(root, "holed") / "b.bin").read_bytes() == b"b" * 100


def test_delete_removes_the_cache_and_only_it(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/a.bin", b"a")
    for key in ("keep", "drop"):
        assert preload("--source-json", s3_source(bucket, "m"), "--key", key, root=root)[0] == 0

    code, result = preload("--delete", "drop", root=root)

    assert (code, result["reason"]) == (0, "Deleted")
    assert not cache_dir(root, "drop").exists() and cache_dir(root, "keep").is_dir()
    code, result = preload("--delete", "drop", root=root)
    assert (code, result["reason"]) == (0, "Deleted") and "nothing to remove" in result["message"]


@pytest.mark.large
def test_a_file_of_several_hundred_mb_is_fetched_in_parallel_ranges(
    s3: Any, bucket: str, root: Path, tmp_path: Path
) -> None:
    size = 320 * MIB + 4097
    block = os.urandom(MIB)
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:  # varied content (not one repeated byte) without holding 320 MiB of random data
        for i in range(size // MIB):
            f.write(bytes([i % 251]) + block[1:])
        f.write(os.urandom(size % MIB))
    from boto3.s3.transfer import TransferConfig

    s3.upload_file(
        str(big),
        bucket,
        "big/model.safetensors",
        Config=TransferConfig(multipart_threshold=16 * MIB, multipart_chunksize=16 * MIB),
    )

    code, result = preload(
        "--source-json",
        s3_source(bucket, "big"),
        "--key",
        "big",
        "--part-size-mb",
        "16",
        "--concurrency",
        "8",
        root=root,
    )

    assert (code, result["reason"], result["bytes"]) == (0, "Downloaded", size)
    got = cache_dir(root, "big") / "model.safetensors"
    assert got.stat().st_size == size
    with open(big, "rb") as a, open(got, "rb") as b:
        while chunk := a.read(16 * MIB):
            assert chunk == b.read(16 * MIB)


def test_several_download_processes_share_the_files(s3: Any, bucket: str, root: Path) -> None:
    files = model_files()
    for name, data in files.items():
        put(s3, bucket, f"llama/{name}", data, part_size=5 * MIB if len(data) > 5 * MIB else None)

    code, result = preload(
        "--source-json",
        s3_source(bucket, "llama"),
        "--key",
        "procs",
        "--processes",
        "2",
        "--concurrency",
        "4",
        "--part-size-mb",
        "5",
        root=root,
    )

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", len(files))
    assert tree_digests(cache_dir(root, "procs")) == digests(files)


def test_dealing_files_to_processes_evens_out_bytes() -> None:
    from warmstart.preload.sources import RemoteFile, s3processes

    files = [RemoteFile(f"f{i}", size, f"k{i}") for i, size in enumerate([100, 90, 50, 40, 10, 5, 5])]
    groups = s3processes.deal(files, 2)
    assert sorted(sum(f.size for f in g) for g in groups) == [150, 150]
    assert s3processes.deal(files[:1], 4) == [[files[0]]]
