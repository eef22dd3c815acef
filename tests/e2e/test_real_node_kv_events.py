"""Routing from the engines' own truth on the real node: `warmstart sim` model pods publish vLLM's KV events, and two
router pods follow them, each with the model's tokenizer that its own init container fetched from S3.

The operator wires it from one setting (`routerConfig.kvEvents: true`): it adds `--kv-events-config` to the model
container and declares its ports, and router pods copy the model's tokenizer files (`preload --files`) into an
emptyDir. Requests sent to one router pod place conversations; the other router pod, which never saw them, sends each
one where the engine's own cache holds it (the engines report the cached prompt tokens).
"""

from __future__ import annotations

import json
import random
import tempfile
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import realstack
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import keys, labels, router
from warmstart.sim import tinytokenizer
from warmstart.sim.workloads import words

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

NAME = "kv-events"
SIZES = {"config.json": 4096, "model.safetensors": 4 * realstack.MiB}


@pytest.fixture(scope="module")
def served(real_stack: realstack.Stack) -> Iterator[str]:
    """The endpoint, its model (weights plus the tiny tokenizer's files) preloaded; yields the model pods' selector."""
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{NAME}", SIZES, seed=11)
    s3 = real_stack.real.s3.client()
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(tinytokenizer.build(scratch).iterdir()):
            s3.upload_file(str(path), model.bucket, f"{model.prefix}/{path.name}")
    host_path = str(real_stack.hostpath_root / NAME)
    manifest = realstack.sim_endpoint(
        NAME, real_stack, model, replicas=2, weights=True, host_path=host_path, router=True
    )
    manifest["spec"]["worker"]["args"] += ["--tokenizer", realstack.MOUNT_PATH]
    manifest["spec"]["intelligentRoutingSpec"]["routerConfig"] = {"kvEvents": True}
    source = ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"])
    real_stack.weights_keys.append(keys.weights_key_in(source, host_path, real_stack.namespace, {}))
    real_stack.create_endpoint(manifest)
    try:
        real_stack.wait_state(NAME, "DeploymentComplete", timeout=420)
        yield f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server"
    finally:
        real_stack.remove_endpoints([NAME], keep_pods=set())


def _admin(pod_ip: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{pod_ip}:{router.ROUTER_ADMIN_PORT}{path}", timeout=10) as answer:
        return json.load(answer) if path.endswith("status") else answer.read().decode()


def _chat(pod_ip: str, system: str, question: str) -> tuple[str, int]:
    """(the model pod's replica that answered, the prompt tokens its engine reports it reused)."""
    body = {"model": NAME, "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    request = urllib.request.Request(
        f"http://{pod_ip}:{router.ROUTER_PORT}/v1/chat/completions",
        data=json.dumps({**body, "max_tokens": 2}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        usage = json.load(answer)["usage"]
        return str(answer.headers["x-sim-replica"]), int(usage["prompt_tokens_details"]["cached_tokens"])


def _metric(pod_ip: str, series: str) -> float:
    """One sample of the router pod's /metrics (0 when absent)."""
    for line in _admin(pod_ip, "/metrics").splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


MATCHED = 'warmstart_router_prefix_tokens_total{kind="matched"}'
UNTOKENIZED = "warmstart_router_kv_untokenized_total"


def test_router_pods_follow_the_engines_events_with_the_models_own_tokenizer(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, served: str
) -> None:
    model_pods = real_stack.ready_pods(served, 2)
    body = real_stack.endpoint(NAME) or {}
    kv = [c for c in body["status"]["conditions"] if c["type"] == "KVEvents"]
    assert kv and kv[0]["status"] == "True" and kv[0]["reason"] == "Wired", kv
    for pod in model_pods:
        assert "--kv-events-config" in pod.spec.containers[0].args
    routers = real_stack.ready_pods(f"{labels.COMPONENT}=router,{labels.ENDPOINT_LABEL}={NAME}", 2)
    # each router pod's init container fetched the tokenizer files, and nothing else, from the model's S3 prefix
    for pod in routers:
        (fetch,) = pod.status.init_container_statuses
        assert fetch.name == router.TOKENIZER_CONTAINER
        result = json.loads(fetch.state.terminated.message)
        assert (result["reason"], result["files"]) == ("Downloaded", 2), result
    a, b = (pod.status.pod_ip for pod in routers)
    model_ips = {pod.status.pod_ip for pod in model_pods}

    def following(ip: str) -> bool:
        engines = _admin(ip, "/router/status")["engines"]
        replicas = engines["replicas"]
        return (
            engines["tokenizer"] == "loaded"
            and {url.split("//", 1)[1].rsplit(":", 1)[0] for url in replicas} == model_ips
            and all(r["events"] is not None and r["engineLoad"] is not None for r in replicas.values())
        )

    for ip in (a, b):
        realstack.eventually(
            lambda ip=ip: following(ip),
            f"router {ip} to subscribe to both engines and read their load",
            120,
            explain=lambda ip=ip: json.dumps(_admin(ip, "/router/status")["engines"], indent=1),
        )

    rng = random.Random(5)
    systems = [words(rng, 120) for _ in range(4)]
    placed = {}
    for system in systems:  # router a places each conversation; its second turn is a hit where a put it
        first, _ = _chat(a, system, words(rng, 10))
        again, cached = _chat(a, system, words(rng, 10))
        assert again == first and cached >= 96, (first, again, cached)
        placed[system] = first

    # router b never saw these conversations: the engines' events tell it where each one is cached
    before = _metric(b, MATCHED)

    def blocks_known() -> bool:
        replicas = _admin(b, "/router/status")["engines"]["replicas"]
        return sum(r["indexBlocks"] for r in replicas.values() if r["events"]["live"]) >= 4 * 6

    realstack.eventually(blocks_known, "router b to index the engines' blocks", 60)
    for system in systems:
        replica, cached = _chat(b, system, words(rng, 10))
        assert (replica, cached >= 96) == (placed[system], True), (placed[system], replica, cached)
    # b matched them by token ids (the text index has never seen them), and tokenized every request
    assert _metric(b, MATCHED) - before >= len(systems) * 96
    assert _metric(b, UNTOKENIZED) == 0
