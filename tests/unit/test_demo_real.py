"""The demo's real-node pieces: the seed adapted to the real node, the facts read from pods, the synthetic model."""

from __future__ import annotations

import json
import pathlib

import yaml

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.controllers.settings import from_env
from warmstart.demo import facts, seed
from warmstart.localcluster import models, nodeplans

SEED = pathlib.Path(__file__).resolve().parents[2] / "examples" / "01-seed" / "inference-endpoint-config.yaml"


def _real_seed() -> dict:
    return seed.real_seed(
        yaml.safe_load(SEED.read_text()),
        namespace="demo-x",
        instance_type="ml.g5.xlarge",
        bucket="warmstart-demo",
        prefix="models/synthetic-1",
        s3_url="http://192.0.2.2:9000",
        region="us-east-1",
        image="127.0.0.1:5000/warmstart:0.1.0-abc",
        host_path="/tmp/c/hostpath/demo",
    )


def test_real_seed_is_a_valid_endpoint_on_the_real_node_running_the_simulator_on_its_cache() -> None:
    manifest = _real_seed()
    spec = InferenceEndpointConfigSpec.model_validate(manifest["spec"])
    assert manifest["metadata"]["namespace"] == "demo-x"
    assert spec.instance_type == "ml.g5.xlarge"
    assert spec.model_source_config.s3_storage is not None
    assert spec.model_source_config.s3_storage.endpoint_url == "http://192.0.2.2:9000"
    assert spec.model_cache_config is not None and spec.model_cache_config.weights_cache is not None
    assert spec.model_cache_config.weights_cache.host_path == "/tmp/c/hostpath/demo"
    worker = spec.worker
    assert worker.image == "127.0.0.1:5000/warmstart:0.1.0-abc"
    assert worker.args is not None and worker.args[-2:] == ["--model-dir", worker.model_volume_mount.mount_path]
    assert worker.probes is not None and worker.probes.readiness_probe is not None
    assert worker.probes.readiness_probe["httpGet"]["path"] == "/health"


def test_real_seed_leaves_the_example_untouched() -> None:
    base = yaml.safe_load(SEED.read_text())
    before = json.dumps(base, sort_keys=True)
    seed.real_seed(
        base,
        namespace="n",
        instance_type="t",
        bucket="bbb",
        prefix="p",
        s3_url="u",
        region="r",
        image="i",
        host_path="/h",
    )
    assert json.dumps(base, sort_keys=True) == before


def test_operator_env_references_the_s3_keys_from_the_secret_allows_the_cache_root_and_watches_one_namespace() -> None:
    settings = from_env(seed.operator_env("reg/warmstart:1", "demo-x", "/tmp/c/hostpath", "6s"))
    assert settings.render.operator_image == "reg/warmstart:1"
    assert settings.render.preload_env_names == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    assert settings.render.allowed_host_paths == ("/tmp/c/hostpath",)
    assert settings.namespaces == ["demo-x"]
    # routers run on the real node: on a kwok node they only look Ready, and the Service would lead nowhere
    assert settings.render.router_node_selector == {nodeplans.REAL_NODE_LABEL: "true"}
    secret = seed.preload_secret("demo-x", "AK", "SK")
    assert secret["metadata"] == {"name": settings.render.preload_env_secret, "namespace": "demo-x"}
    assert secret["stringData"] == {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}
    assert "SK" not in json.dumps(seed.operator_env("i", "n", "/r", "6s"))


def _pod(node: str, message: str, ready_at: str | None) -> dict:
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}] if ready_at else []
    return {
        "metadata": {"name": "p1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": node},
        "status": {
            "conditions": conditions,
            "initContainerStatuses": [{"state": {"terminated": {"message": message}}}],
        },
    }


def test_pod_facts_read_the_init_containers_result_and_the_time_to_ready() -> None:
    message = json.dumps({"reason": "Downloaded", "bytes": 2**30, "seconds": 7.5})
    found = facts.pod_facts(_pod("real-0", message, "2026-01-01T00:00:12Z"), {"real-0"})
    assert (found.real, found.init_reason, found.init_bytes, found.init_seconds) == (True, "Downloaded", 2**30, 7.5)
    assert found.ready_seconds == 12.0
    assert "Downloaded" in facts.describe(found)


def test_pod_facts_of_a_kwok_pod_without_a_message_and_not_ready() -> None:
    found = facts.pod_facts(_pod("kwok-0", "", None), {"real-0"})
    assert (found.real, found.init_reason, found.ready_seconds) == (False, "", None)
    assert "not Ready" in facts.describe(found)


def test_placement_and_nodes() -> None:
    assert facts.placement({"status": {"warmPlacement": {"warmPods": 1, "coldPods": 2}}}) == (1, 2)
    assert facts.placement({}) == (0, 0)
    nodes = [
        {"metadata": {"name": "a", "labels": {"warmstart.io/real-node": "true"}}},
        {"metadata": {"name": "b", "labels": {}}},
    ]
    assert facts.real_node_names(nodes) == {"a"}


def test_weights_read_parses_the_simulators_line() -> None:
    log = "... loaded 5 files, 1073741900 bytes in 0.42 s (checked against the preload manifest)\n"
    assert facts.weights_read(log) == (1073741900, 0.42)
    assert facts.weights_read("sim: ready") is None


def test_synthetic_model_layout_adds_up_and_content_is_deterministic_and_not_constant() -> None:
    sizes = models.layout(10 * 2**20 + 3, 4)
    assert sum(sizes.values()) == 10 * 2**20 + 3 and len(sizes) == 4
    first = b"".join(models.chunks("a", 5 * 2**20, chunk=2**20))
    assert len(first) == 5 * 2**20
    assert first == b"".join(models.chunks("a", 5 * 2**20))
    assert first != b"".join(models.chunks("b", 5 * 2**20))
    assert len(set(first[:4096])) > 200


def test_a_failing_step_fails_the_demo_with_a_non_zero_exit_naming_the_step() -> None:
    from warmstart.demo import flow

    try:
        with flow.step("pushing the image"):
            raise RuntimeError("registry refused")
    except SystemExit as failed:
        assert failed.code != 0 and failed.code is not None
        assert "pushing the image" in str(failed.code) and "registry refused" in str(failed.code)
    else:
        raise AssertionError("the step did not fail")


def test_the_demo_cli_documents_reuse_and_its_switches() -> None:
    import contextlib
    import io

    from warmstart.demo import flow

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        flow.main(["--help"])
    for switch in ("--dir", "--skip-bench", "--skip-routing", "--model-gib", "--namespace"):
        assert switch in out.getvalue()
