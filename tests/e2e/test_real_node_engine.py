"""A real engine on the real node: examples/09-llamacpp serving SmolLM2-135M from the node cache.

The engine image is compiled from pinned llama.cpp source (images/llamacpp/Dockerfile; minutes the first time, then
cached by content: CI builds it in the background and this module runs last, waiting for that build through the
build lock) and pushed to the local registry. The GGUF goes into the S3 server; the chart's operator preloads it into
the node's hostPath; the engine opens it read-only from the model volume; requests go to the endpoint's Service,
through the router pods, to llama.cpp. Nothing is simulated: the completion is the model's, and the reused prompt
tokens are what the engine itself reports.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

import realstack
from warmstart.api import preloading
from warmstart.api.sources import ModelSourceConfig
from warmstart.demo import engine, realengine
from warmstart.localcluster import enginemodel, imaging, pushing
from warmstart.render import deployments, keys, labels

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.engine]

NAME = "smollm2"


@pytest.fixture(scope="module")
def served(real_stack: realstack.Stack) -> Iterator[tuple[dict[str, Any], str]]:
    """The example endpoint, Ready on the real node; yields its manifest and weights key."""
    image = pushing.push(imaging.engine_image(), real_stack.real.registry)
    uploaded = enginemodel.upload(real_stack.real.s3, real_stack.bucket, f"models/{NAME}")
    host_path = str(real_stack.hostpath_root / NAME)
    manifest = engine.endpoint(
        yaml.safe_load(engine.EXAMPLE.read_text()),
        namespace=real_stack.namespace,
        instance_type=realstack.INSTANCE_TYPE,
        bucket=uploaded.bucket,
        prefix=uploaded.prefix,
        s3_url=real_stack.real.s3.pod_url,
        region=real_stack.real.s3.region,
        image=image,
        host_path=host_path,
    )
    source = ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"])
    key = keys.weights_key_in(source, host_path, real_stack.namespace, {})
    real_stack.weights_keys.append(key)
    real_stack.create_endpoint(manifest)
    try:
        real_stack.wait_state(NAME, "DeploymentComplete", timeout=600)
        yield manifest, key
    finally:
        real_stack.remove_endpoints([NAME], keep_pods=set())


def _service_url(core: client.CoreV1Api, namespace: str) -> str:
    service = core.read_namespaced_service(NAME, namespace)
    return f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}"


def test_the_engine_answers_through_the_service_and_the_router_and_reuses_the_prompt(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, served: tuple[dict[str, Any], str]
) -> None:
    (model_pod,) = real_stack.ready_pods(f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server", 1)
    assert model_pod.spec.node_name == real_stack.node
    url = _service_url(real_core, real_stack.namespace)
    # the Service leads to the router pods, which forward to the engine
    realstack.eventually(
        lambda: realengine.through_router(real_core, real_stack.namespace, NAME),
        "the endpoint's Service to reach the router pods",
        explain=real_stack.describe,
    )
    prompt = engine.long_prompt(300)
    first = engine.ask(url, prompt, model=enginemodel.MODEL_NAME, max_tokens=8)
    assert first.text.strip(), first
    assert first.prompt_tokens > 200, first  # the engine computed the whole prompt
    again = engine.ask(url, prompt, model=enginemodel.MODEL_NAME, max_tokens=8)
    # the same prompt on the one replica: the engine reports that it reused almost all of it from its prompt cache
    assert again.cached_tokens >= first.prompt_tokens - 1, (first, again)
    assert again.prompt_tokens <= 1, again
    assert again.text == first.text, "temperature 0: the same prompt gives the same tokens"
    # the engine's own Prometheus counters saw both requests
    metrics = _engine_metrics(model_pod.status.pod_ip)
    assert metrics.get("llamacpp:prompt_tokens_total", 0.0) >= first.prompt_tokens, metrics


def test_the_engine_read_its_weights_from_the_node_cache(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, served: tuple[dict[str, Any], str]
) -> None:
    manifest, key = served
    (pod,) = real_stack.ready_pods(f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server", 1)
    (worker,) = pod.spec.containers
    gguf = engine.model_path(manifest)
    (mount,) = [m for m in worker.volume_mounts if m.mount_path == str(pathlib.PurePosixPath(gguf).parent)]
    assert mount.read_only, mount
    # the preload Job filled the cache before the pod started: its init container found the file in place
    init = [s for s in pod.status.init_container_statuses if s.name == deployments.INIT_CONTAINER]
    result = json.loads(init[0].state.terminated.message)
    assert result["reason"] == "AlreadyPresent", result
    # on the node: the cache holds the very bytes of the pinned GGUF
    on_node = pathlib.Path(preloading.model_dir(str(real_stack.hostpath_root / NAME), key)) / enginemodel.GGUF
    assert _sha256(on_node) == _sha256(enginemodel.gguf())
    # and the engine says it loaded that file (its /props), with the model's own metadata
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{engine.PORT}/props", timeout=10) as answer:
        props = json.load(answer)
    assert props["model_path"] == gguf, props.get("model_path")
    assert props["model_alias"] == enginemodel.MODEL_NAME, props.get("model_alias")


def _engine_metrics(pod_ip: str) -> dict[str, float]:
    """The engine's own Prometheus counters, from its pod (the host reaches pod IPs on the real node)."""
    with urllib.request.urlopen(f"http://{pod_ip}:{engine.PORT}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
