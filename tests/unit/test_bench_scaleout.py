"""bench/scaleout.py's pure parts: the endpoint it applies through the operator, and the check that each run took
its configuration's path (a warm run found the weights, a cold run downloaded every byte)."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

import scaleout as bench
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.localcluster import models

MODEL = models.SyntheticModel(bucket="bench-bucket", prefix="models/m", files={"a.safetensors": 100})


def _manifest() -> dict[str, Any]:
    found: dict[str, Any] = bench.endpoint_manifest(
        "ns", MODEL, "http://s3:9000", "us-east-1", "img:1", "/cache/root", "ml.g5.xlarge"
    )
    return found


def test_the_endpoint_is_a_valid_seed_endpoint_at_zero_replicas_without_the_image_cache() -> None:
    manifest = _manifest()
    spec = InferenceEndpointConfigSpec.model_validate(manifest["spec"])
    assert manifest["metadata"] == {"name": bench.NAME, "namespace": "ns"}
    assert spec.replicas == 0
    assert spec.instance_type == "ml.g5.xlarge"
    assert spec.model_cache_config is not None and spec.model_cache_config.image_cache is not None
    assert spec.model_cache_config.image_cache.enabled is False
    assert spec.worker.image == "img:1"


def test_a_run_that_did_not_take_its_configurations_path_is_named() -> None:
    warm, cold = bench.WARM, bench.COLD
    found = bench.Sample(config=warm, ready_s=1.0, init_reason="AlreadyPresent")
    assert bench.expected_path(warm, 100, found) is None
    assert "not AlreadyPresent" in (
        bench.expected_path(warm, 100, bench.Sample(warm, 1.0, init_reason="Downloaded")) or ""
    )
    full = bench.Sample(config=cold, ready_s=9.0, init_reason="Downloaded", init_bytes=100)
    assert bench.expected_path(cold, 100, full) is None
    partial = bench.Sample(config=cold, ready_s=9.0, init_reason="Downloaded", init_bytes=40)
    assert "not Downloaded with 100" in (bench.expected_path(cold, 100, partial) or "")
    assert bench.expected_path(cold, 100, bench.Sample(cold, 1.0, init_reason="AlreadyPresent")) is not None


def test_the_summary_gives_the_median_the_spread_and_the_load_of_each_configuration() -> None:
    samples = [
        bench.Sample(bench.WARM, ready, load_average=load) for ready, load in ((3.0, 1.0), (5.0, 2.0), (4.0, 9.0))
    ]
    figures = bench.summary(samples)[bench.WARM]
    assert (figures["ready_s"], figures["min_ready_s"], figures["max_ready_s"]) == (4.0, 3.0, 5.0)
    assert figures["load_average"] == 2.0 and figures["runs"] == 3
