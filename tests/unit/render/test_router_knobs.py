"""Every router knob the docs name can be set on an endpoint and reaches the rendered router ConfigMap;
with ``kvEvents`` the model container publishes vLLM's KV events, and a command the operator does not
understand is left alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.routerknobs import RouterKnobs
from warmstart.api.routers import RouterConfig
from warmstart.render import deployments, endpoints, kvwiring, router
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import Endpoint, ObjectRef

ROOT = Path(__file__).resolve().parents[3]
REF = ObjectRef(kind="InferenceEndpointConfig", name="example-model", namespace="team-a", uid="1111-2222")
CONTEXT = RenderContext(operator_image="warmstart:test")

#: A value for every knob, none of them its default.
KNOBS: dict[str, Any] = {
    "blockChars": 512,
    "maxBlocks": 64,
    "indexCapacityBlocks": 4096,
    "homeBlocks": 2,
    "homeChoices": 2,
    "prefillAware": True,
    "loadEpsilon": 0.25,
    "loadMinCeiling": 4,
    "balanceEpsilon": 0.3,
    "balanceWindow": 256,
    "balanceSlack": 2.0,
    "sessionHeader": "x-conversation",
    "sessionField": "session",
    "connectTimeoutSeconds": 1.5,
    "readTimeoutSeconds": 120.0,
    "maxBodyBytes": 1048576,
    "maxBufferedBytes": 33554432,
    "bodyTimeoutSeconds": 10.0,
    "maxBufferedBytesPerClient": 4194304,
    "maxBodiesPerClient": 8,
    "writeTimeoutSeconds": 30.0,
    "retries": 2,
    "kvEvents": True,
    "kvEventsPort": 6557,
    "kvEventsReplayPort": 6558,
    "kvBlockSize": 32,
    "speculativeTtlSeconds": 1.0,
    "engineMetricsPath": "/stats/metrics",
    "engineLoadIntervalSeconds": 0.5,
}
#: RouterConfig fields an endpoint sets elsewhere (strategy, worker.requestLimits) or the operator fills.
ELSEWHERE = {
    "strategy",
    "maxConcurrentRequests",
    "maxQueueSize",
    "overflowStatusCode",
    "warmNodes",
    "tokenizerDir",
    "kvEventsPortsRelative",
    "trustedProxies",
}


def _endpoint(routing: dict[str, Any], **worker: Any) -> Endpoint:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())["spec"]
    doc["intelligentRoutingSpec"] = routing
    doc["worker"].update(worker)
    return endpoints.from_iec(REF, InferenceEndpointConfigSpec.model_validate(doc))


def test_every_router_knob_is_settable_or_named_elsewhere() -> None:
    config_keys = {field.alias or name for name, field in RouterConfig.model_fields.items()}
    config_keys = {re.sub(r"_(\w)", lambda m: m.group(1).upper(), k) for k in config_keys}
    knob_keys = set(RouterKnobs.model_json_schema(by_alias=True)["properties"])
    assert knob_keys == set(KNOBS)
    assert config_keys == knob_keys | ELSEWHERE


def test_each_knob_set_on_an_iec_is_read_back_from_the_rendered_configmap() -> None:
    endpoint = _endpoint({"enabled": True, "routingStrategy": "prefixaware", "routerConfig": KNOBS})
    data = yaml.safe_load(router.configmap(endpoint)["data"]["router.yaml"])
    for knob, value in KNOBS.items():
        assert data[knob] == value, knob
    config = RouterConfig.from_configmap_data(router.configmap(endpoint)["data"])
    assert config.prefill_aware and config.kv_events and config.kv_block_size == 32


def test_trusted_proxies_are_the_admins_and_never_an_endpoints() -> None:
    endpoint = _endpoint({"enabled": True, "routerConfig": {"trustedProxies": ["0.0.0.0/0"], "maxBodiesPerClient": 8}})
    assert RouterConfig.from_configmap_data(router.configmap(endpoint)["data"]).trusted_proxies == ()
    context = RenderContext(operator_image="warmstart:test", router_trusted_proxies=("10.0.0.0/8",))
    (configmap,) = [m for m in router.manifests(endpoint, context) if m["kind"] == "ConfigMap"]
    config = RouterConfig.from_configmap_data(configmap["data"])
    assert config.trusted_proxies == ("10.0.0.0/8",) and config.max_bodies_per_client == 8


def test_the_router_docs_name_only_settable_knobs() -> None:
    doc = (ROOT / "docs" / "router.md").read_text()
    table = doc.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert documented, "the configuration table was not found"
    assert documented <= set(KNOBS) | ELSEWHERE


def test_kv_events_add_vllms_flag_and_ports_to_a_vllm_command() -> None:
    endpoint = _endpoint(
        {"enabled": True, "routerConfig": {"kvEvents": True}},
        command=["vllm", "serve", "/opt/ml/model"],
        args=["--block-size", "16"],
    )
    container = deployments.deployment(endpoint, Generation("w", "i"), CONTEXT)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"] == ["vllm", "serve", "/opt/ml/model"]
    assert container["args"][:2] == ["--block-size", "16"] and container["args"][2] == "--kv-events-config"
    assert json.loads(container["args"][3]) == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "replay_endpoint": "tcp://*:5558",
    }
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["kv-events"] == 5557 and ports["kv-replay"] == 5558
    assert kvwiring.of(endpoint).reason is None


def test_a_command_the_operator_does_not_understand_is_not_rewritten() -> None:
    command = ["/bin/sh", "-c", "exec my-server --port 8000"]
    endpoint = _endpoint({"enabled": True, "routerConfig": {"kvEvents": True}}, command=command, image="me/server:1")
    container = deployments.deployment(endpoint, Generation("w", "i"), CONTEXT)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"] == command and "args" not in container
    reason = kvwiring.of(endpoint).reason
    assert reason is not None and "not one the operator understands" in reason
    # the user's own flag is kept as written
    own = ["vllm", "serve", "m", "--kv-events-config", '{"enable_kv_cache_events":true}']
    endpoint = _endpoint({"enabled": True, "routerConfig": {"kvEvents": True}}, command=own)
    assert kvwiring.of(endpoint).args is None and kvwiring.of(endpoint).reason is None


def test_images_and_entrypoints_vllm_runs_under() -> None:
    config = RouterConfig(kv_events=True)
    for command, args, image in (
        (None, ["--model", "/m"], "vllm/vllm-openai:v0.11.0"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "/m"], "x/y"),
        (None, ["sim", "--replicas", "1"], "warmstart:dev"),
    ):
        assert kvwiring.wiring(command, args, image, config).args is not None, (command, args, image)
    assert kvwiring.wiring(None, ["--model", "/m"], "ggml-org/llama.cpp:server", config).reason
    # off: nothing changes
    assert kvwiring.wiring(["vllm", "serve"], None, "vllm", RouterConfig()) == kvwiring.Wiring()
