"""JumpStart resolution's pure parts: version choice, instance families, the ranked-config merge, bucket names."""

from __future__ import annotations

import pytest

from warmstart.api import jumpstartspecs as jumpstart

VERSIONS = ["1.0.0", "1.2.3", "1.10.0", "2.0.1", "2.0.10"]


@pytest.mark.parametrize(
    ("requested", "chosen"), [(None, "2.0.10"), ("*", "2.0.10"), ("1.*", "1.10.0"), ("2.0.1", "2.0.1")]
)
def test_pick_version(requested: str | None, chosen: str) -> None:
    assert jumpstart.pick_version("m", requested, VERSIONS) == chosen


def test_unknown_version_lists_the_newest() -> None:
    with pytest.raises(jumpstart.VersionNotFound, match=r"3\.0\.0.*2\.0\.10"):
        jumpstart.pick_version("m", "3.0.0", VERSIONS)
    with pytest.raises(jumpstart.VersionNotFound):
        jumpstart.pick_version("m", "3.*", VERSIONS)


@pytest.mark.parametrize(("instance", "fam"), [("ml.g5.48xlarge", "g5"), ("ml.p4d.24xlarge", "p4d"), ("g5", "g5")])
def test_family(instance: str, fam: str) -> None:
    assert jumpstart.family(instance) == fam


def test_top_ranked_config_components_merge_deeply_in_order() -> None:
    spec = {
        "a": 1,
        "nested": {"x": 1, "y": 1},
        "inference_config_rankings": {"overall": {"rankings": ["fast", "slow"]}},
        "inference_configs": {"fast": {"component_names": ["c1", "c2"]}},
        "inference_config_components": {"c1": {"nested": {"y": 2}, "a": 2}, "c2": {"a": 3}, "slow": {"a": 9}},
    }
    merged = jumpstart.merged_spec(spec)
    assert (merged["a"], merged["nested"]) == (3, {"x": 1, "y": 2})
    assert spec["nested"] == {"x": 1, "y": 1}  # the input is not changed


def test_bucket_names_and_overrides() -> None:
    assert jumpstart.buckets("us-west-2", {}) == (
        "jumpstart-cache-prod-us-west-2",
        "jumpstart-private-cache-prod-us-west-2",
    )
    assert (
        jumpstart.buckets(
            "us-west-2", {"WARMSTART_JUMPSTART_BUCKET": "a", "AWS_JUMPSTART_CONTENT_BUCKET_OVERRIDE": "b"}
        )[0]
        == "a"
    )
    assert jumpstart.buckets("x", {"AWS_JUMPSTART_GATED_CONTENT_BUCKET_OVERRIDE": "g"})[1] == "g"
    overridden = {"WARMSTART_JUMPSTART_BUCKET": "a", "AWS_JUMPSTART_GATED_CONTENT_BUCKET_OVERRIDE": "g"}
    assert jumpstart.buckets("x", overridden, "mirror", "gated-mirror") == (
        "mirror",
        "gated-mirror",
    )  # the operator's settings win
