"""The llama.cpp engine: its image's tag follows the Dockerfile, the Dockerfile pins and checks its source, and the
example endpoint (examples/09-llamacpp) points the engine at the model volume.

The image itself is compiled and run on the real node by tests/e2e/test_real_node_engine.py.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from warmstart.demo import engine
from warmstart.localcluster import engineimage, enginemodel, pruning, stepping

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / engineimage.DOCKERFILE).read_text()


def _checkout(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    (tmp_path / engineimage.DOCKERFILE).parent.mkdir(parents=True)
    (tmp_path / engineimage.DOCKERFILE).write_text(text)
    return tmp_path


def test_the_tag_is_the_pinned_version_and_a_key_of_the_dockerfile_and_the_base(tmp_path: pathlib.Path) -> None:
    checkout = _checkout(tmp_path, "ARG LLAMA_CPP_PYTHON_VERSION=9.8.7\nFROM scratch\n")
    ref = engineimage.reference(checkout, "localhost/base:1")
    assert re.fullmatch(r"localhost/warmstart-llamacpp:9\.8\.7-[0-9a-f]{12}", ref), ref
    assert engineimage.reference(checkout, "localhost/base:1") == ref
    assert engineimage.reference(checkout, "localhost/base:2") != ref
    (checkout / engineimage.DOCKERFILE).write_text("ARG LLAMA_CPP_PYTHON_VERSION=9.8.7\nFROM scratch\nUSER 1\n")
    assert engineimage.reference(checkout, "localhost/base:1") != ref


def test_a_dockerfile_without_a_pinned_version_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(stepping.StepError, match="LLAMA_CPP_PYTHON_VERSION"):
        engineimage.version(_checkout(tmp_path, "FROM scratch\n"))
    with pytest.raises(stepping.StepError, match="needs a source checkout"):
        engineimage.version(tmp_path / "elsewhere")


def test_the_dockerfile_pins_the_sdist_checks_its_hash_and_runs_the_server_as_non_root() -> None:
    assert engineimage.version(ROOT) == "0.3.36"
    assert re.search(r"^ARG LLAMA_CPP_PYTHON_SHA256=[0-9a-f]{64}$", DOCKERFILE, re.MULTILINE)
    assert "sha256sum -c" in DOCKERFILE
    assert '"llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"' in DOCKERFILE
    # nothing downloaded at build time but the sdist: no web UI, no curl, no OpenSSL
    for flag in ("-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=OFF"):
        assert flag in DOCKERFILE, flag
    assert "--target llama-server" in DOCKERFILE
    final = DOCKERFILE.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^USER 65532:65532$", final, re.MULTILINE)
    assert f'ENTRYPOINT ["{engineimage.BINARY}"]' in final
    for name in engineimage.BASE_ARGUMENTS:
        assert f"ARG {name}=" in DOCKERFILE


def test_the_example_serves_the_pinned_gguf_from_the_model_volume_and_is_probed_on_health() -> None:
    manifest = yaml.safe_load(engine.EXAMPLE.read_text())
    spec = manifest["spec"]
    mount = spec["worker"]["modelVolumeMount"]["mountPath"]
    assert engine.model_path(manifest) == f"{mount}/{enginemodel.GGUF}"
    args = spec["worker"]["args"]
    assert engine.flag_value(args, "--port") == str(spec["worker"]["modelInvocationPort"]["containerPort"])
    assert engine.flag_value(args, "--alias") == enginemodel.MODEL_NAME
    assert "--metrics" in args and engine.flag_value(args, "--threads") == "1"
    assert not [a for a in args if str(a).startswith("--") and "=" in str(a)], "llama-server refuses --flag=value"
    assert spec["loadBalancer"]["healthCheckPath"] == "/health"
    assert spec["modelCacheConfig"]["weightsCache"]["enabled"] is True


def test_the_endpoint_is_pointed_at_the_cluster_and_keeps_the_engines_flags() -> None:
    base = yaml.safe_load(engine.EXAMPLE.read_text())
    manifest = engine.endpoint(
        base,
        namespace="ns",
        instance_type="ml.g5.xlarge",
        bucket="b",
        prefix="models/m",
        s3_url="http://10.0.0.1:7070",
        region="us-east-1",
        image="127.0.0.1:5000/warmstart-llamacpp:0.3.36-abc",
        host_path="/var/cache/ws",
        replicas=2,
    )
    spec = manifest["spec"]
    assert manifest["metadata"]["namespace"] == "ns"
    assert spec["modelSourceConfig"]["s3Storage"] == {
        "bucketName": "b",
        "region": "us-east-1",
        "endpointUrl": "http://10.0.0.1:7070",
    }
    assert spec["modelSourceConfig"]["modelLocation"] == "models/m"
    assert spec["modelCacheConfig"]["weightsCache"]["hostPath"] == "/var/cache/ws"
    assert (spec["worker"]["image"], spec["replicas"]) == ("127.0.0.1:5000/warmstart-llamacpp:0.3.36-abc", 2)
    assert spec["worker"]["args"] == base["spec"]["worker"]["args"]
    assert base["metadata"]["namespace"] == "default", "the example itself is left alone"


def test_an_engine_without_a_model_flag_is_named() -> None:
    with pytest.raises(ValueError, match="--model <path>"):
        engine.model_path({"spec": {"worker": {"args": ["--port", "8000"]}}})


def test_the_long_prompt_is_long_and_the_same_every_time() -> None:
    assert engine.long_prompt(600) == engine.long_prompt(600)
    assert len(engine.long_prompt(600).split()) >= 600


def test_the_engines_layers_survive_other_builds_clean_up(tmp_path: pathlib.Path) -> None:
    (tmp_path / "llamacpp-0.3.36-abc.log").write_text("STEP 11/14: RUN cmake ...\n--> 0123456789ab\n")
    (tmp_path / "project-0.1.0-def.log").write_text("--> Using cache fedcba987654\n")
    assert pruning.kept_image_ids(tmp_path) == {"0123456789ab"}
