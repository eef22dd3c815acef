"""`preload --files`: a router pod's copy of a model's tokenizer files, through moto's real S3 server.

Only the named top-level files come down (never the weights, never a file of the same name in a subdirectory);
names the model lacks are skipped; with `--exit-zero` a failure is reported in the termination message and the log,
and the exit status stays 0 so the router pod starts and routes by request text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from preloadhelpers import cache_dir, digests, preload, put, s3_source, tree_digests
from warmstart.api import preloading
from warmstart.api.sources import ModelSourceConfig

MIB = 1 << 20


def _source(bucket: str, location: str) -> ModelSourceConfig:
    return ModelSourceConfig.model_validate_json(s3_source(bucket, location))


def _run(args: list[str], root: Path) -> tuple[int, dict[str, Any]]:
    """The rendered `tokenizer_args`, its --root and --termination-log replaced by the test's."""
    cut = args.index("--root")
    rest = args[cut + 2 :]
    rest = rest[: rest.index("--termination-log")] + rest[rest.index("--termination-log") + 2 :]
    return preload(*args[1:cut], *rest, root=root)


def test_only_the_tokenizer_files_of_the_model_come_down(s3: Any, bucket: str, root: Path) -> None:
    tokenizer = {"tokenizer.json": os.urandom(200_000), "tokenizer_config.json": b'{"chat_template": "{{ x }}"}'}
    weights = {
        "model.safetensors": os.urandom(6 * MIB),
        "config.json": b"{}",
        "original/tokenizer.json": b"a file of the same name, not at the top",
    }
    for name, data in {**tokenizer, **weights}.items():
        put(s3, bucket, f"m/{name}", data)

    code, result = _run(preloading.tokenizer_args(_source(bucket, "m"), str(root)), root)

    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 2)
    assert result["bytes"] == sum(map(len, tokenizer.values()))
    # chat_template.jinja is named but the model has none: skipped, not an error
    assert tree_digests(cache_dir(root, preloading.TOKENIZER_KEY)) == digests(tokenizer)
    assert preloading.tokenizer_dir(str(root)) == str(cache_dir(root, preloading.TOKENIZER_KEY))


def test_a_failed_fetch_is_reported_and_exits_zero(s3: Any, bucket: str, root: Path) -> None:
    code, result = _run(preloading.tokenizer_args(_source(bucket + "-missing", "m"), str(root)), root)
    assert code == 0
    assert (result["outcome"], result["reason"]) == ("Failed", "NotFound"), result
    # without --exit-zero the same failure is a non-zero exit, as every other preload's
    args = [a for a in preloading.tokenizer_args(_source(bucket + "-missing", "m"), str(root)) if a != "--exit-zero"]
    code, result = _run(args, root)
    assert code != 0 and result["reason"] == "NotFound"


def test_files_must_be_top_level_names(s3: Any, bucket: str, root: Path) -> None:
    put(s3, bucket, "m/tokenizer.json", b"{}")
    for bad in ("../secrets", "a/tokenizer.json", ",", ".."):
        code, result = preload("--source-json", s3_source(bucket, "m"), "--key", "tokenizer", "--files", bad, root=root)
        assert (code != 0, result["reason"]) == (True, "InvalidSource"), bad
        assert "--files takes comma-separated top-level file names" in result["message"]
