"""The demo's real-engine step: examples/09-llamacpp on the real node, one real completion, the prompt cache's effect
on time to first token, and the replica's start on a warm and on a cold node cache.

The engine image is compiled once (cached by content) and pushed; the GGUF goes into the S3 server; the operator
preloads it; requests go to the endpoint's Service (its router) from the host, as any client on the node would.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

from warmstart.api import API_VERSION
from warmstart.controllers.storage import Store
from warmstart.demo import engine, facts
from warmstart.localcluster import enginemodel, imaging, pushing
from warmstart.render import labels, router

NAME = "smollm2"
KIND = "InferenceEndpointConfig"
Waiter = Callable[[Callable[[], Any], float, str], Any]


def image(registry: str) -> str:
    """The engine image, compiled on first use (minutes) and pushed to ``registry``."""
    return pushing.push(imaging.engine_image(), registry)


def deploy(store: Store, real: Any, namespace: str, engine_image: str, host_path: pathlib.Path) -> dict[str, Any]:
    """Upload the GGUF and apply the example endpoint (one replica); returns the applied manifest."""
    uploaded = enginemodel.upload(real.s3, "warmstart-demo", f"models/{NAME}")
    print(f"    s3://{uploaded.bucket}/{uploaded.prefix}/{enginemodel.GGUF}: {uploaded.size} bytes", flush=True)
    manifest = engine.endpoint(
        yaml.safe_load(engine.EXAMPLE.read_text()),
        namespace=namespace,
        instance_type=real.instance_type,
        bucket=uploaded.bucket,
        prefix=uploaded.prefix,
        s3_url=real.s3.pod_url,
        region=real.s3.region,
        image=engine_image,
        host_path=str(host_path),
    )
    store.apply(manifest)
    return manifest


def service_targets(core: client.CoreV1Api, namespace: str, name: str = NAME) -> set[str]:
    """The ready pods the endpoint's Service sends to (its EndpointSlices): the model pods, or its router pods once
    the operator has switched it (docs/router.md)."""
    slices = client.DiscoveryV1Api(core.api_client).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={name}"
    )
    return {
        e.target_ref.name
        for s in slices.items
        for e in s.endpoints or []
        if e.target_ref is not None and (e.conditions is None or e.conditions.ready is not False)
    }


def through_router(core: client.CoreV1Api, namespace: str, name: str = NAME) -> bool:
    """Whether the Service leads only to the endpoint's router pods."""
    targets = service_targets(core, namespace, name)
    return bool(targets) and all(t.startswith(f"{router.name(name)}-") for t in targets)


def service_url(core: client.CoreV1Api, namespace: str) -> str:
    service = core.read_namespaced_service(NAME, namespace)
    return f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}"


def show_completion(url: str) -> engine.Answer:
    """One real chat-less completion, printed as the model wrote it."""
    prompt = "The three primary colors are"
    answer = engine.ask(url, prompt, model=enginemodel.MODEL_NAME, max_tokens=24)
    print(f"    prompt:     {prompt!r}", flush=True)
    print(f"    completion: {answer.text.strip()!r}", flush=True)
    return answer


def show_prompt_cache(url: str) -> tuple[engine.Answer, engine.Answer]:
    """The same long prompt twice: the first computes every token, the second reuses them from the engine's cache."""
    prompt = engine.long_prompt(600)
    cold = engine.ask(url, prompt, model=enginemodel.MODEL_NAME, max_tokens=8)
    warm = engine.ask(url, prompt, model=enginemodel.MODEL_NAME, max_tokens=8)
    for label, answer in (("first ", cold), ("second", warm)):
        print(
            f"    {label} request: TTFT {answer.ttft * 1000:7.0f} ms; the engine computed {answer.prompt_tokens} "
            f"prompt tokens and reused {answer.cached_tokens} from its prompt cache",
            flush=True,
        )
    if warm.ttft > 0:
        print(f"    the prompt cache cuts time to first token {cold.ttft / warm.ttft:.0f}x on this prompt", flush=True)
    return cold, warm


def pod_to_ready(store: Store, namespace: str, wait: Waiter, cache: pathlib.Path | None) -> float:
    """Scale the endpoint to 0 and back to 1 and return the new pod's creation-to-Ready seconds.

    With ``cache`` (the weights directory on the node) removed in between, the pod's own init container downloads
    the model first: a cold node. Without, it finds the files in place: a warm node.
    """
    selector = f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server"

    def scale(replicas: int) -> None:
        store.merge_patch(API_VERSION, KIND, NAME, {"spec": {"replicas": replicas}}, namespace)

    scale(0)
    wait(lambda: not store.list("v1", "Pod", namespace, label_selector=selector), 180, "the engine pod to stop")
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    scale(1)

    def ready() -> float | None:
        for pod in store.list("v1", "Pod", namespace, label_selector=selector):
            seconds = facts.ready_seconds(pod)
            if seconds is not None:
                init = facts.pod_facts(pod, set())
                print(f"    {init.init_reason or 'no init result'}: {seconds:.0f} s to Ready", flush=True)
                return max(seconds, 0.001)
        return None

    found: float = wait(ready, 300, "the engine pod to be Ready")
    return found
