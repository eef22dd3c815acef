"""The command line the operator builds (warmstart.api.preloading) is the one the preloader parses."""

from __future__ import annotations

import json

import pytest

from warmstart.api import preloading
from warmstart.api.sources import ModelSourceConfig
from warmstart.preload import cli

SOURCES = {
    "s3": {"modelSourceType": "s3", "s3Storage": {"bucketName": "models", "region": "us-west-2"}, "modelLocation": "m"},
    "fsx": {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}, "modelLocation": "m"},
    "pvc": {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "models"}, "modelLocation": "m"},
    "hf": {
        "modelSourceType": "huggingface",
        "huggingFaceModel": {"modelId": "org/m", "tokenSecretRef": {"name": "s", "key": "k"}},
    },
    "hf-public": {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": "org/m"}},
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_preload_argv_parses_to_the_source_key_root_and_contract_paths(name: str) -> None:
    source = ModelSourceConfig.model_validate(SOURCES[name])
    argv = preloading.preload_args(source, "k1", "/opt/dlami/nvme", expected_bytes=5)
    assert argv[0] == "preload"
    args = cli.parser().parse_args(argv[1:])
    assert ModelSourceConfig.model_validate(json.loads(args.source_json)) == source
    assert (args.key, args.root, args.if_missing, args.expected_bytes) == ("k1", "/opt/dlami/nvme", True, 5)
    assert args.termination_log == preloading.TERMINATION_LOG
    assert args.mount_root == preloading.SOURCE_MOUNT
    assert args.hf_token_file == (preloading.HF_TOKEN_FILE if name == "hf" else None)


def test_delete_argv_parses_to_a_delete_of_the_key_under_the_root() -> None:
    argv = preloading.delete_args("k1", "/mnt/nvme0")
    args = cli.parser().parse_args(argv[1:])
    assert (argv[0], args.delete, args.root, args.source_json) == ("preload", "k1", "/mnt/nvme0", None)


def test_cache_dir_is_the_warmstart_directory_of_the_root() -> None:
    assert preloading.cache_dir("/opt/dlami/nvme/") == "/opt/dlami/nvme/warmstart"
    assert preloading.cache_dir("/") == "/warmstart"
