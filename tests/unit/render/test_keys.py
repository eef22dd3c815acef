"""Cache keys: 128 bits, fit in label keys and Job names, and differ whenever what decides access differs."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from warmstart.api import nodelabels
from warmstart.api.caches import NodeTargeting
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import jobs, keys, scopes
from warmstart.render.context import RenderContext

S3 = {"modelSourceType": "s3", "s3Storage": {"bucketName": "models", "region": "us-west-2"}, "modelLocation": "m"}
PVC = {"modelSourceType": "kubernetesVolume", "kubernetesVolume": {"claimName": "weights"}, "modelLocation": "m"}
HF_PUBLIC = {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": "org/model", "commitSHA": "a" * 40}}
HF_TOKEN = {
    "modelSourceType": "huggingface",
    "huggingFaceModel": {"modelId": "org/model", "commitSHA": "a" * 40, "tokenSecretRef": {"name": "hf", "key": "t"}},
}
FSX = {"modelSourceType": "fsx", "fsxStorage": {"fileSystemId": "fs-0123456789abcdef0"}, "modelLocation": "m"}
ROOT = "/opt/dlami/nvme"


def source(raw: dict[str, Any]) -> ModelSourceConfig:
    return ModelSourceConfig.model_validate(raw)


def key(raw: dict[str, Any], namespace: str, groups: dict[str, list[str]] | None = None) -> str:
    return keys.weights_key_in(source(raw), ROOT, namespace, groups or {})


def test_a_key_has_128_bits_and_fits_every_name_it_goes_into() -> None:
    k = key(S3, "team-a")
    assert re.fullmatch(r"[0-9a-f]{32}", k)  # 32 hex characters = 128 bits
    name_part = nodelabels.weights_ready_label(k).split("/", 1)[1]
    assert len(name_part) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", name_part)
    assert len(jobs.preload_job_name(k, "node-" + "x" * 250, 99)) <= 63  # Job names become pod label values
    assert len(keys.weights_cache_name(k)) <= 63
    assert len(keys.image_key("img:1", NodeTargeting())) == 32


@pytest.mark.parametrize("raw", [S3, PVC, HF_TOKEN, FSX], ids=["s3", "pvc", "hf-token", "fsx"])
def test_a_credentialed_source_gets_a_key_per_namespace(raw: dict[str, Any]) -> None:
    assert key(raw, "team-a") != key(raw, "team-b")
    assert key(raw, "team-a") == key(raw, "team-a")


def test_a_public_source_is_shared_by_every_namespace() -> None:
    assert key(HF_PUBLIC, "team-a") == key(HF_PUBLIC, "team-b")
    assert scopes.access_scope(source(HF_PUBLIC), "team-a", {}) == scopes.PUBLIC


def test_a_token_secret_changes_the_key_of_a_hub_model() -> None:
    """The private copy (fetched with a token) never shares the public key, in any namespace."""
    assert key(HF_TOKEN, "team-a") != key(HF_PUBLIC, "team-a")


def test_trust_groups_share_credentialed_sources_but_never_pvcs() -> None:
    groups = {"ml": ["team-a", "team-b"]}
    assert key(S3, "team-a", groups) == key(S3, "team-b", groups)
    assert key(S3, "team-a", groups) != key(S3, "team-c", groups)  # outside the group
    assert key(S3, "team-a", groups) != key(S3, "team-a")  # joining a group is a new scope
    assert key(PVC, "team-a", groups) != key(PVC, "team-b", groups)  # a PVC name is per namespace


def test_a_group_and_a_namespace_of_the_same_name_do_not_collide() -> None:
    assert key(S3, "ml", {"ml": ["team-a"]}) != key(S3, "team-a", {"ml": ["team-a"]})


def test_distinct_access_deciding_inputs_never_share_a_key() -> None:
    """Every combination of source, root and scope gives its own key (a collision attempt at small scale)."""
    variants = [S3, PVC, HF_PUBLIC, HF_TOKEN, FSX]
    variants += [{**S3, "s3Storage": {"bucketName": "models", "region": "us-east-1"}}]
    variants += [{**S3, "modelLocation": "m/"}, {**S3, "modelLocation": "m2"}]
    variants += [{**PVC, "kubernetesVolume": {"claimName": "weights2"}}]
    roots = [ROOT, "/mnt/other"]
    namespaces = ["team-a", "team-b", "scope"]
    seen: dict[str, tuple[Any, ...]] = {}
    for raw, root, namespace in itertools.product(variants, roots, namespaces):
        k = keys.weights_key_in(source(raw), root, namespace, {})
        combo = (str(raw), root, namespace if scopes.needs_credentials(source(raw)) else "public")
        assert seen.setdefault(k, combo) == combo, f"{combo} collides with {seen[k]}"


def test_a_namespace_in_two_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="two cache sharing groups"):
        RenderContext(cache_sharing_groups={"x": ["a", "b"], "y": ["b"]})
