"""Gateway mode on the real node: the operator (installed by the chart) renders the endpoint picker pods and the
InferencePool beside `warmstart sim` model pods; a real Envoy configured as a GIE gateway (ext_proc to the picker
Service, ORIGINAL_DST to the pod it names) sends requests through, and a prefix group sticks to one replica.

The gateway is the user's, created by the test as a user would (`gatewaypod`): Envoy from the project image in a pod on
the real node, on a bootstrap that `envoy_gateway.bootstrap` renders into a ConfigMap, behind a Service. It reaches
the picker through the picker Service's cluster IP and the model pods through their pod IPs. The test sends its
requests to the gateway Service's cluster IP (through the node's kube-proxy) and checks each reply came through Envoy
and from which sim replica. The two picker pods elect a leader through their Lease with the Role the operator
rendered; only the leader is ready, and when it goes the other one takes over while the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from kubernetes import client

import gatewaypod
import helming
import realstack
from warmstart.render import labels, pickers, router
from warmstart.render.envoy_gateway import Address, GatewaySpec
from warmstart.sim.workloads import words

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

NAME = "gateway"
SIZES = {"config.json": 4096, "model.safetensors": realstack.MiB}
PICKERS = f"{labels.COMPONENT}=endpoint-picker,{labels.ENDPOINT_LABEL}={NAME}"
MODELS = f"{labels.ENDPOINT_LABEL}={NAME},{labels.COMPONENT}=model-server"
GATEWAY = f"{NAME}-envoy"


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


@pytest.fixture
def gateway(real_stack: realstack.Stack, real_core: client.CoreV1Api, served: None) -> Iterator[str]:
    """The user's Envoy gateway pod in front of the picker Service (FailClose) and the model pods: its Service URL.
    Removed before the endpoint, whose teardown waits for every pod to go."""
    namespace = real_stack.namespace
    picker_ip = realstack.eventually(
        lambda: helming.get_or_none(
            lambda: real_core.read_namespaced_service(pickers.name(NAME), namespace).spec.cluster_ip
        ),
        "the picker Service",
        120,
    )
    spec = GatewaySpec(picker=Address(picker_ip, pickers.GRPC_PORT), failure_mode="FailClose")
    gatewaypod.create(real_stack.api, GATEWAY, namespace, real_stack.image, spec, realstack.REAL_SELECTOR)
    try:
        service_ip = real_core.read_namespaced_service(GATEWAY, namespace).spec.cluster_ip
        yield f"http://{service_ip}:{gatewaypod.SERVICE_PORT}"
    finally:
        gatewaypod.delete(real_stack.api, GATEWAY, namespace)


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
        assert answer.headers.get("server") == "envoy", dict(answer.headers)  # through the gateway's Envoy
        json.loads(text)
        return str(answer.headers["x-sim-replica"])


def _serves(url: str, prefix: str) -> bool:
    """Whether one completion through the gateway is answered 200."""
    body = json.dumps({"model": NAME, "prompt": f"{prefix} ready?", "max_tokens": 2}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_a_gie_gateway_routes_through_the_picker_pods_and_a_prefix_group_sticks(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, gateway: str
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
    # the gateway pod: the project image's Envoy, non-root on a read-only root filesystem, on the real node
    (envoy,) = real_stack.ready_pods(f"app.kubernetes.io/name={GATEWAY}", 1, timeout=180)
    assert envoy.spec.node_name == real_stack.node
    (container,) = envoy.spec.containers
    assert container.command == ["envoy"] and container.image == real_stack.image
    assert container.security_context.read_only_root_filesystem and container.security_context.run_as_non_root
    assert container.security_context.capabilities.drop == ["ALL"]
    rng = random.Random(3)
    systems = [words(rng, 120) for _ in range(3)]
    # kube-proxy programs the gateway's and the picker's Services a moment after their pods are ready; until then
    # Envoy refuses the connection or (FailClose) answers 500
    realstack.eventually(lambda: _serves(gateway, systems[0]), f"the gateway {gateway} to serve", 60)

    async def through_envoy() -> dict[str, set[str]]:
        answered: dict[str, set[str]] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            for turn in range(4 * len(systems)):  # the groups interleaved
                system = systems[turn % len(systems)]
                replica = await _complete(session, gateway, system, words(rng, 8))
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
    # until kube-proxy sends the picker Service to the new leader, Envoy's ext_proc stream fails and FailClose
    # answers 500 (docs/gateway.md): the gateway serves again within a bounded time
    realstack.eventually(lambda: _serves(gateway, systems[0]), "the gateway to serve through the new leader", 60)
    again = asyncio.run(through_envoy())
    assert all(len(replicas) == 1 for replicas in again.values()), again
