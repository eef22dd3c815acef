"""JumpStart resolution from a manifest and specs laid out as in the public bucket, served by moto's S3 server."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preloadhelpers import cache_dir, tree_digests
from warmstart.api import jumpstartspecs as jumpstart
from warmstart.preload import cli
from warmstart.preload.sources import s3 as s3_source

REGION = "us-west-2"
ECR = "763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.29.0-lmi11.0.0-cu124"


def spec(model_id: str, version: str, *, gated: bool = False) -> dict[str, Any]:
    base = f"{model_id}/artifacts/inference-prepack/v{version}/"
    body: dict[str, Any] = {
        "model_id": model_id,
        "version": version,
        "hosting_artifact_key": f"{model_id}/artifacts/inference/v{version}/",
        "hosting_prepacked_artifact_key": base,
        "hosting_artifact_s3_data_type": "S3Prefix",
        "inference_environment_variables": [
            {
                "name": "SM_NUM_GPUS",
                "type": "text",
                "default": "1",
                "scope": "container",
                "required_for_model_class": True,
            },
            {
                "name": "MAX_INPUT_LENGTH",
                "type": "text",
                "default": "4095",
                "scope": "container",
                "required_for_model_class": True,
            },
            {
                "name": "SAGEMAKER_PROGRAM",
                "type": "text",
                "default": "inference.py",
                "scope": "container",
                "required_for_model_class": False,
            },
        ],
        "hosting_instance_type_variants": {
            "regional_aliases": {REGION: {"alias_ecr_uri_1": ECR}},
            "variants": {
                "g5": {"regional_properties": {"image_uri": "$alias_ecr_uri_1"}},
                "p4d": {"regional_properties": {"image_uri": "$alias_ecr_uri_1"}},
                "ml.g5.12xlarge": {"properties": {"environment_variables": {"SM_NUM_GPUS": "4"}}},
            },
        },
        "inference_config_rankings": {"overall": {"rankings": ["lmi-optimized", "tgi"]}},
        "inference_configs": {
            "lmi-optimized": {"component_names": ["lmi-optimized"]},
            "tgi": {"component_names": ["tgi"]},
        },
        "inference_config_components": {
            "lmi-optimized": {
                "hosting_prepacked_artifact_key": base.replace("inference-prepack", "inference-prepack-lmi")
            },
            "tgi": {"hosting_prepacked_artifact_key": "wrong/"},
        },
    }
    if gated:
        body["gated_bucket"] = True
        body["hosting_eula_key"] = f"fmhMetadata/eula/{model_id}Eula.txt"
    return body


@pytest.fixture
def buckets(s3: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    content, gated = f"js-content-{uuid.uuid4().hex[:8]}", f"js-gated-{uuid.uuid4().hex[:8]}"
    for b in (content, gated):
        s3.create_bucket(Bucket=b)
    manifest = []
    for model_id, versions, is_gated in (
        ("meta-textgeneration-llama-3-1-8b", ["1.0.0", "1.2.3", "1.10.0", "2.0.1"], True),
        ("huggingface-llm-mistral-7b", ["1.0.0"], False),
    ):
        for v in versions:
            key = f"community_models/{model_id}/specs_v{v}.json"
            s3.put_object(Bucket=content, Key=key, Body=json.dumps(spec(model_id, v, gated=is_gated)).encode())
            manifest.append({"model_id": model_id, "version": v, "min_version": "2.49.0", "spec_key": key})
    s3.put_object(Bucket=content, Key="models_manifest.json", Body=json.dumps(manifest).encode())
    artifacts = "huggingface-llm-mistral-7b/artifacts/inference-prepack-lmi/v1.0.0/"
    s3.put_object(Bucket=content, Key=artifacts + "config.json", Body=b"{}")
    s3.put_object(Bucket=content, Key=artifacts + "model.safetensors", Body=b"w" * 5000)
    monkeypatch.setenv("AWS_JUMPSTART_CONTENT_BUCKET_OVERRIDE", content)
    monkeypatch.setenv("AWS_JUMPSTART_GATED_CONTENT_BUCKET_OVERRIDE", gated)
    yield content, gated


def resolve(
    s3: Any,
    model_id: str,
    version: str | None,
    instance_type: str,
    accept_eula: bool,
    *,
    content_bucket: str | None = None,
) -> jumpstart.Resolution:
    """Resolve as the preloader does: through its S3 client, with the buckets the environment names."""
    content, gated = jumpstart.buckets(REGION, os.environ, content_bucket)
    return jumpstart.resolve(
        model_id,
        version,
        REGION,
        instance_type,
        accept_eula,
        s3_source.object_reader(s3),
        content_bucket=content,
        gated_bucket=gated,
    )


def test_open_model_resolves_artifacts_image_and_env(s3: Any, buckets: tuple[str, str]) -> None:
    content, _ = buckets
    r = resolve(s3, "huggingface-llm-mistral-7b", None, "ml.g5.12xlarge", False)
    assert (r.bucket, r.gated, r.eula_key, r.version) == (content, False, None, "1.0.0")
    assert r.key == "huggingface-llm-mistral-7b/artifacts/inference-prepack-lmi/v1.0.0/"  # the top-ranked config won
    assert r.image == ECR  # the g5 family variant, its alias resolved for the region
    assert r.env == {"SM_NUM_GPUS": "4", "MAX_INPUT_LENGTH": "4095"}  # required ones, then the instance override
    assert r.s3_data_type == "S3Prefix"


def test_gated_model_needs_accept_eula(s3: Any, buckets: tuple[str, str]) -> None:
    content, gated = buckets
    with pytest.raises(jumpstart.EulaNotAccepted, match="acceptEula: true") as info:
        resolve(s3, "meta-textgeneration-llama-3-1-8b", "2.0.1", "ml.p4d.24xlarge", False)
    assert f"s3://{content}/fmhMetadata/eula/" in str(info.value)
    r = resolve(s3, "meta-textgeneration-llama-3-1-8b", "2.0.1", "ml.p4d.24xlarge", True)
    assert (r.bucket, r.gated, r.env["SM_NUM_GPUS"]) == (gated, True, "1")


@pytest.mark.parametrize(
    ("requested", "chosen"), [(None, "2.0.1"), ("*", "2.0.1"), ("1.*", "1.10.0"), ("1.2.3", "1.2.3")]
)
def test_version_selection(s3: Any, buckets: tuple[str, str], requested: str | None, chosen: str) -> None:
    r = resolve(s3, "meta-textgeneration-llama-3-1-8b", requested, "ml.g5.2xlarge", True)
    assert r.version == chosen and f"v{chosen}/" in r.key


def test_unknown_id_version_and_instance_type(s3: Any, buckets: tuple[str, str]) -> None:
    with pytest.raises(jumpstart.ModelNotFound, match="'no-such-model' is not in"):
        resolve(s3, "no-such-model", None, "ml.g5.2xlarge", True)
    with pytest.raises(jumpstart.VersionNotFound, match=r"no version matching '9\.9\.9'.*2\.0\.1"):
        resolve(s3, "meta-textgeneration-llama-3-1-8b", "9.9.9", "ml.g5.2xlarge", True)
    with pytest.raises(jumpstart.UnsupportedInstanceType, match=r"ml\.c5\.xlarge"):
        resolve(s3, "huggingface-llm-mistral-7b", None, "ml.c5.xlarge", True)


def run_cli(*args: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    tlog = tmp_path / f"tlog-{uuid.uuid4().hex[:6]}"
    code = cli.main([*args, "--termination-log", str(tlog)])
    return code, json.loads(tlog.read_text())


def test_cli_resolve_only_prints_json(
    s3: Any, buckets: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = json.dumps({"modelId": "huggingface-llm-mistral-7b", "modelVersion": "1.*"})
    code, result = run_cli(
        "--jumpstart-json",
        ref,
        "--region",
        REGION,
        "--instance-type",
        "ml.g5.12xlarge",
        "--resolve-only",
        tmp_path=tmp_path,
    )
    assert (code, result["reason"]) == (0, "Resolved")
    printed = json.loads(capsys.readouterr().out)
    assert printed["image"] == ECR and printed["s3Uri"].startswith(f"s3://{buckets[0]}/") and printed["gated"] is False


@pytest.mark.parametrize(
    ("ref", "code", "reason"),
    [
        ({"modelId": "meta-textgeneration-llama-3-1-8b"}, 69, "EulaNotAccepted"),
        ({"modelId": "nope"}, 66, "NotFound"),
        ({"modelId": "meta-textgeneration-llama-3-1-8b", "modelVersion": "3.0.0", "acceptEula": True}, 66, "NotFound"),
    ],
)
def test_cli_resolution_failures(
    s3: Any, buckets: tuple[str, str], tmp_path: Path, ref: dict[str, Any], code: int, reason: str
) -> None:
    got = run_cli(
        "--jumpstart-json",
        json.dumps(ref),
        "--region",
        REGION,
        "--instance-type",
        "ml.g5.12xlarge",
        "--resolve-only",
        tmp_path=tmp_path,
    )
    assert (got[0], got[1]["reason"]) == (code, reason)


def test_cli_preloads_a_jumpstart_model(s3: Any, buckets: tuple[str, str], tmp_path: Path, root: Path) -> None:
    ref = json.dumps({"modelId": "huggingface-llm-mistral-7b"})
    code, result = run_cli(
        "--jumpstart-json",
        ref,
        "--region",
        REGION,
        "--instance-type",
        "ml.g5.12xlarge",
        "--key",
        "js",
        "--root",
        str(root),
        tmp_path=tmp_path,
    )
    assert (code, result["reason"], result["files"]) == (0, "Downloaded", 2)
    assert set(tree_digests(cache_dir(root, "js"))) == {"config.json", "model.safetensors"}


def test_s3_errors_propagate_for_the_caller_to_classify(
    s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError):  # the operator retries these; a spec problem it does not
        resolve(s3, "any", None, "ml.g5.2xlarge", True, content_bucket="no-such-content-bucket")
    monkeypatch.setenv("AWS_JUMPSTART_CONTENT_BUCKET_OVERRIDE", "no-such-content-bucket")
    code, result = run_cli(
        "--jumpstart-json",
        '{"modelId": "any"}',
        "--region",
        REGION,
        "--instance-type",
        "ml.g5.2xlarge",
        "--resolve-only",
        tmp_path=tmp_path,
    )
    assert (code, result["reason"]) == (66, "NotFound") and "no-such-content-bucket" in result["message"]
