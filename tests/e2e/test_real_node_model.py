"""An endpoint on the real node, end to end: the preload Job downloads a 1 GB model from the S3 server into the
hostPath, the project image is pre-pulled, two `warmstart sim` model pods start from the warm cache (reading every
weight file before the operator's default readiness probe passes), real requests to the endpoint's own Service reach
them through the router pods, and on a cold node (weights caching
on, but tainted so no preload Job prepared it) the model pod's own init containers download the model into the node
cache.

The model is uploaded and preloaded once for the module (``seed``); the tests then look at what that run left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import pathlib
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import helming
import realstack
from warmstart.api import GROUP, VERSION, nodelabels, preloading
from warmstart.api.caches import MDCC_PLURAL, MIC_PLURAL
from warmstart.api.routers import RouterConfig
from warmstart.api.sources import ModelSourceConfig
from warmstart.controllers import filling
from warmstart.demo import realengine
from warmstart.render import daemonsets, deployments, keys, labels, names, preload_containers, router, security

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

#: 1 GiB in five files, as a sharded checkpoint is laid out
SEED_SIZES = {"config.json": 4096, **{f"model-0000{i}-of-00004.safetensors": 256 * realstack.MiB for i in range(1, 5)}}
COLD_SIZES = {"config.json": 4096, "model.safetensors": 24 * realstack.MiB}


@dataclasses.dataclass(frozen=True)
class Deployed:
    name: str
    model: realstack.Model
    host_path: str
    key: str

    def pod_selector(self) -> str:
        return f"{labels.ENDPOINT_LABEL}={self.name},{labels.COMPONENT}=model-server"


def _deploy(
    stack: realstack.Stack, name: str, sizes: dict[str, int], seed: int, *, replicas: int, weights: bool, router: bool
) -> Deployed:
    model = realstack.upload_model(stack.real.s3, stack.bucket, f"models/{name}", sizes, seed)
    host_path = str(stack.hostpath_root / name)
    manifest = realstack.sim_endpoint(
        name, stack, model, replicas=replicas, weights=weights, host_path=host_path, router=router
    )
    source = ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"])
    stack.create_endpoint(manifest)
    key = keys.weights_key_in(source, host_path, stack.namespace, {})
    if weights:
        stack.weights_keys.append(key)
    return Deployed(name, model, host_path, key)


@pytest.fixture(scope="module")
def seed(real_stack: realstack.Stack) -> Iterator[Deployed]:
    deployed = _deploy(real_stack, "seed", SEED_SIZES, seed=3, replicas=2, weights=True, router=True)
    try:
        real_stack.wait_state("seed", "DeploymentComplete", timeout=420)
        yield deployed
    finally:
        # the stack outlives this module: the next module on the real node expects it without our pods
        real_stack.remove_endpoints(["seed"], keep_pods=set())


def _terminated(status: Any) -> Any:
    assert status.state.terminated is not None, f"{status.name} has not finished: {status.state}"
    return status.state.terminated


def test_preload_job_downloads_the_model_from_s3_into_the_hostpath_and_labels_the_node(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, seed: Deployed
) -> None:
    jobs = client.BatchV1Api(real_stack.api).list_namespaced_job(real_stack.namespace).items
    preload_jobs = [j for j in jobs if "preload" in json.dumps(j.spec.template.spec.containers[0].args or [])]
    assert preload_jobs, [j.metadata.name for j in jobs]
    messages = []
    for job in preload_jobs:
        for pod in real_core.list_namespaced_pod(
            real_stack.namespace, label_selector=f"job-name={job.metadata.name}"
        ).items:
            assert pod.spec.node_name == real_stack.node
            terminated = _terminated(pod.status.container_statuses[0])
            assert terminated.exit_code == 0, terminated
            messages.append(json.loads(terminated.message))
    downloaded = [m for m in messages if m["reason"] == "Downloaded"]
    assert len(downloaded) == 1, messages
    assert downloaded[0]["bytes"] == seed.model.total_bytes
    assert downloaded[0]["files"] == len(SEED_SIZES)
    assert downloaded[0]["seconds"] > 0

    node = real_core.read_node(real_stack.node)
    assert node.metadata.labels.get(nodelabels.weights_ready_label(seed.key)) == nodelabels.READY

    cache = pathlib.Path(preloading.model_dir(seed.host_path, seed.key))
    manifest = json.loads((cache / ".warmstart-manifest.json").read_text())
    assert manifest["key"] == seed.key
    assert {f["path"]: f["size"] for f in manifest["files"]} == {f.path: f.size for f in seed.model.files}
    assert manifest["totalBytes"] == seed.model.total_bytes
    for uploaded in seed.model.files:
        on_disk = cache / uploaded.path
        digest = hashlib.sha256()
        with on_disk.open("rb") as handle:
            while chunk := handle.read(8 * realstack.MiB):
                digest.update(chunk)
        assert digest.hexdigest() == uploaded.sha256, f"{on_disk} differs from what was uploaded"


def _ctr(stack: realstack.Stack, *args: str) -> subprocess.CompletedProcess[str]:
    address = str(stack.real.containerd_socket(stack.node))
    return subprocess.run(["ctr", "--address", address, "-n", "k8s.io", *args], capture_output=True, text=True)


def _image_refs(stack: realstack.Stack, image: str) -> list[str]:
    """Every name of `image` in the node's containerd: the tag, `repo@digest`, `sha256:<id>`."""
    rows = [line.split() for line in _ctr(stack, "images", "ls").stdout.splitlines()[1:]]
    digests = {row[2] for row in rows if len(row) > 2 and row[0] == image}
    return [row[0] for row in rows if len(row) > 2 and row[2] in digests]


def test_project_image_is_prepulled_and_its_cache_is_ready(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, seed: Deployed
) -> None:
    """The operator pod already runs from the project image, so the pre-pull proves something only once the image is
    gone from the node: remove every name of it from the node's containerd, delete the pre-pull pod, and the
    DaemonSet's new pod must pull it from the registry (the kubelet's `Pulled` event, not "already present")."""
    objects = client.CustomObjectsApi(real_stack.api)

    def ours() -> dict[str, Any] | None:
        items = objects.list_namespaced_custom_object(GROUP, VERSION, real_stack.namespace, MIC_PLURAL)["items"]
        found = [m for m in items if m["spec"]["image"] == real_stack.image]
        return found[0] if found else None

    def ready() -> dict[str, Any] | None:
        status = ((ours() or {}).get("status")) or {}
        return status if status.get("state") == "Ready" else None

    realstack.eventually(ready, "the project image's cache to be Ready", explain=real_stack.describe)
    mic = ours()
    assert mic is not None
    selector = ",".join(f"{k}={v}" for k, v in daemonsets.selector_labels(mic["metadata"]["name"]).items())
    (old_pod,) = real_core.list_namespaced_pod(real_stack.namespace, label_selector=selector).items

    refs = _image_refs(real_stack, real_stack.image)
    assert refs, f"{real_stack.image} is not on the node before the test"
    removed = _ctr(real_stack, "images", "rm", "--sync", *refs)
    assert removed.returncode == 0 and not _image_refs(real_stack, real_stack.image), removed.stderr
    real_core.delete_namespaced_pod(old_pod.metadata.name, real_stack.namespace)

    def pulled() -> list[str] | None:
        """The kubelet's `Pulled` messages for the project image in the new pod, once one says it pulled it (the
        pod's first init container runs the operator image, which is the project image here)."""
        pods = real_core.list_namespaced_pod(real_stack.namespace, label_selector=selector).items
        for pod in (p for p in pods if p.metadata.uid != old_pod.metadata.uid):
            events = real_core.list_namespaced_event(
                real_stack.namespace, field_selector=f"involvedObject.uid={pod.metadata.uid}"
            ).items
            messages = [
                str(e.message) for e in events if e.reason == "Pulled" and real_stack.image in (e.message or "")
            ]
            if any("Successfully pulled" in m for m in messages):
                return messages
        return None

    realstack.eventually(pulled, "the new pre-pull pod to pull the project image", explain=real_stack.describe)
    status = realstack.eventually(ready, "the project image's cache Ready again", explain=real_stack.describe)
    assert status["readyNodes"] == status["targetNodes"] == 1
    assert _image_refs(real_stack, real_stack.image), "the image is on the node again"


def test_model_pods_run_the_simulator_from_the_warm_cache(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, seed: Deployed
) -> None:
    pods = real_stack.ready_pods(seed.pod_selector(), 2)
    for pod in pods:
        assert pod.spec.node_name == real_stack.node
        (worker,) = pod.spec.containers
        assert worker.args[:1] == ["sim"] and "--model-dir" in worker.args
        assert [m.mount_path for m in worker.volume_mounts if m.name == "model-weights"] == [realstack.MOUNT_PATH]
        owner, init = pod.status.init_container_statuses
        assert (owner.name, init.name) == (preload_containers.OWNERSHIP_CONTAINER, deployments.INIT_CONTAINER)
        assert _terminated(owner).exit_code == 0  # the directory is 65532's already: one stat
        terminated = _terminated(init)
        assert terminated.exit_code == 0
        result = json.loads(terminated.message)
        assert result["reason"] == "AlreadyPresent", result
        # the fast path itself (manifest read + one stat per file), as the preload measures it
        assert result["seconds"] < 1.0, result
        # the container as a whole adds the interpreter's start (imports): ~0.5 s idle, 3 s seen on a 2-core host at
        # load 11; a loose bound that still tells it from a download (startedAt/finishedAt have 1 s resolution)
        wall = terminated.finished_at - terminated.started_at
        assert wall <= datetime.timedelta(seconds=10), f"the warm init container ran {wall}"
        # the simulator read every weight file before it turned ready
        log = real_core.read_namespaced_pod_log(pod.metadata.name, real_stack.namespace, container="worker")
        assert f"loaded {len(SEED_SIZES)} files, {seed.model.total_bytes} bytes" in log, log
        assert "checked against the preload manifest" in log, log


def _post(url: str, prompt: str) -> tuple[str, dict[str, Any]]:
    body = json.dumps({"model": "seed", "prompt": prompt, "max_tokens": 4}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(answer.headers.get("x-sim-replica", "")), json.load(answer)


def _router_warm_nodes(pod_ip: str) -> list[str] | None:
    """The warmNodes a router pod applies, from its /router/status on the admin port."""
    with urllib.request.urlopen(f"http://{pod_ip}:{router.ROUTER_ADMIN_PORT}/router/status", timeout=10) as answer:
        found: list[str] | None = json.load(answer)["config"].get("warmNodes")
        return found


def _placements(pod_ip: str) -> dict[str, float]:
    """The router pod's `warmstart_router_placement_requests_total` by placement, from its admin port."""
    with urllib.request.urlopen(f"http://{pod_ip}:{router.ROUTER_ADMIN_PORT}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("warmstart_router_placement_requests_total{"):
            placement = line.split('placement="', 1)[1].split('"', 1)[0]
            found[placement] = float(line.rsplit(" ", 1)[1])
    return found


def test_requests_to_the_endpoints_service_reach_the_simulator_pods_through_the_router(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, seed: Deployed
) -> None:
    """The endpoint's own Service (`seed`, as clients call it) leads to the router pods, which forward to the model
    pods; every request lands on the warm node and the routers count it as warm (warmNodes from the node label);
    each router keeps a prompt prefix on one model pod."""
    model_pods = real_stack.ready_pods(seed.pod_selector(), 2)
    routers = real_stack.ready_pods(f"{labels.COMPONENT}=router,{labels.ENDPOINT_LABEL}=seed", 2)
    assert {p.spec.node_name for p in routers} == {real_stack.node}
    router_names = {p.metadata.name for p in routers}
    realstack.eventually(
        lambda: realengine.service_targets(real_core, real_stack.namespace, "seed") == router_names,
        "the endpoint's Service to reach the router pods",
        explain=real_stack.describe,
    )
    assert realengine.service_targets(real_core, real_stack.namespace, router.models_service_name("seed")) == {
        p.metadata.name for p in model_pods
    }
    # the model pods turned ready by the operator's default probe, on loadBalancer.healthCheckPath
    for pod in model_pods:
        probe = pod.spec.containers[0].readiness_probe
        assert (probe.http_get.path, probe.http_get.port) == (realstack.HEALTH_PATH, "http")
    configmap = real_core.read_namespaced_config_map(router.name("seed"), real_stack.namespace)
    assert RouterConfig.from_configmap_data(configmap.data).warm_nodes == (real_stack.node,)
    for pod in routers:
        realstack.eventually(
            lambda ip=pod.status.pod_ip: _router_warm_nodes(ip) == [real_stack.node],
            f"router {pod.metadata.name} to apply warmNodes",
            60,
        )
    before = sum(_placements(p.status.pod_ip).get("warm", 0.0) for p in routers)

    service = real_core.read_namespaced_service("seed", real_stack.namespace)
    url = f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}/v1/completions"
    names = {p.metadata.name for p in model_pods}
    for request in range(12):
        replica, answer = _post(url, f"through the Service, request {request}")
        assert replica.rsplit("-", 1)[0] in names, "the answer came from a simulator pod (x-sim-replica)"
        assert answer["choices"], answer
    # every request went through a router, which counted it as landing on a warm node
    after = sum(_placements(p.status.pod_ip).get("warm", 0.0) for p in routers)
    assert after - before == 12, (before, after)

    # each router keeps the requests that share a prefix on one model pod (where its KV cache is). Two router
    # replicas that each balance their own share of the traffic may place a new prefix differently (docs/router.md,
    # "The trade-off"), so stickiness is asserted per router, on requests sent to each router pod directly: a
    # prefix's next request always fits the share bound its placement met (one request of slack more), while
    # a router placing at random would pass all 8 prefixes with probability 1/256.
    for index, pod in enumerate(routers):
        replicas_by_prefix: dict[int, set[str]] = {}
        for group in range(4):
            prefix = f"router {index} system prompt {group}: " + " ".join(f"tok{group}-{i}" for i in range(400))
            for question in range(2):
                direct = f"http://{pod.status.pod_ip}:{router.ROUTER_PORT}/v1/completions"
                replica, answer = _post(direct, f"{prefix} question {question}")
                assert answer["choices"], answer
                replicas_by_prefix.setdefault(group, set()).add(replica)
        assert {r.rsplit("-", 1)[0] for r in set().union(*replicas_by_prefix.values())} <= names, replicas_by_prefix
        for group, replicas in replicas_by_prefix.items():
            assert len(replicas) == 1, f"router {pod.metadata.name} sent prefix {group} to {replicas}"


def _routing(stack: realstack.Stack, enabled: bool) -> None:
    client.CustomObjectsApi(stack.api).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        stack.namespace,
        realstack.PLURAL,
        "seed",
        {"spec": {"intelligentRoutingSpec": {"enabled": enabled}}},
    )


def test_turning_routing_off_and_on_never_fails_a_request_to_the_endpoints_service(
    real_stack: realstack.Stack, real_core: client.CoreV1Api, seed: Deployed
) -> None:
    """Requests keep flowing to the same ClusterIP while the Service moves to the model pods, the router is removed,
    a new router starts and the Service moves back to it: kube-proxy on the real node, no request fails."""
    model_names = {p.metadata.name for p in real_stack.ready_pods(seed.pod_selector(), 2)}
    service = real_core.read_namespaced_service("seed", real_stack.namespace)
    url = f"http://{service.spec.cluster_ip}:{service.spec.ports[0].port}/v1/completions"
    router_pod = f"{router.name('seed')}-"
    answered: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        sent = 0
        while not stop.is_set():
            try:
                replica, _answer = _post(url, f"switching, request {sent}")
                answered.append(replica)
            except Exception as error:  # noqa: BLE001 - every failure is the finding
                failures.append(f"request {sent}: {error!r}")
            sent += 1
            stop.wait(0.05)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        _routing(real_stack, False)
        realstack.eventually(
            lambda: realengine.service_targets(real_core, real_stack.namespace, "seed") == model_names,
            "the Service to reach the model pods",
            explain=real_stack.describe,
        )
        apps = client.AppsV1Api(real_stack.api)
        realstack.eventually(
            lambda: (
                helming.get_or_none(lambda: apps.read_namespaced_deployment(router.name("seed"), real_stack.namespace))
                is None
            ),
            "the router to be removed",
            explain=real_stack.describe,
        )
        direct = len(answered)
        _routing(real_stack, True)

        def routed() -> bool:
            targets = realengine.service_targets(real_core, real_stack.namespace, "seed")
            return len(targets) == 2 and all(t.startswith(router_pod) for t in targets)

        realstack.eventually(routed, "the Service to reach the new router pods", explain=real_stack.describe)
        realstack.eventually(lambda: len(answered) > direct + 20, "requests through the new routers")
    finally:
        stop.set()
        thread.join(60)
    assert not failures, failures[:5]
    assert {r.rsplit("-", 1)[0] for r in answered} <= model_names


#: a taint the preload Jobs do not tolerate: the planner gives the tainted node no Job, the cold endpoint's pods
#: tolerate it, so they land on a node whose cache root no Job ever prepared
COLD_TAINT = {"key": "warmstart.io/e2e-cold", "value": "true", "effect": "NoSchedule"}


@contextlib.contextmanager
def _tainted(core: client.CoreV1Api, node: str, taint: dict[str, str]) -> Iterator[None]:
    """The node with ``taint`` added for the block; only that taint is removed afterwards."""

    def taints() -> list[dict[str, Any]]:
        found = core.read_node(node).spec.taints or []
        return [core.api_client.sanitize_for_serialization(t) for t in found if t.key != taint["key"]]

    core.patch_node(node, {"spec": {"taints": [*taints(), taint]}})
    try:
        yield
    finally:
        core.patch_node(node, {"spec": {"taints": taints() or None}})


def test_cold_node_model_pod_downloads_into_the_node_cache_as_65532_and_starts(
    real_stack: realstack.Stack, real_core: client.CoreV1Api
) -> None:
    """Weights caching ON, but the node got no preload Job: the model pod's own init containers fill the cache, and the
    operator labels the node ready from that pod's result."""
    name = "cold"
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{name}", COLD_SIZES, 7)
    host_path = real_stack.hostpath_root / name
    assert not (host_path / "warmstart").exists()
    toleration = {**COLD_TAINT, "operator": "Equal"}
    manifest = realstack.sim_endpoint(
        name,
        real_stack,
        model,
        replicas=1,
        weights=True,
        host_path=str(host_path),
        router=False,
        kubernetes={"tolerations": [toleration]},
        max_deploy_seconds=0,  # no target node means the gate would wait; 0 deploys at once (Degraded)
    )
    source = ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"])
    key = keys.weights_key_in(source, str(host_path), real_stack.namespace, {})
    cache_name = keys.weights_cache_name(key)
    cache_label = names.label_value(cache_name)
    objects = client.CustomObjectsApi(real_stack.api)
    before = {p.metadata.uid for p in real_core.list_namespaced_pod(real_stack.namespace).items}
    try:
        with _tainted(real_core, real_stack.node, COLD_TAINT):
            real_stack.create_endpoint(manifest)

            def untargeted() -> dict[str, Any] | None:
                mdcc = helming.get_or_none(
                    lambda: objects.get_namespaced_custom_object(
                        GROUP, VERSION, real_stack.namespace, MDCC_PLURAL, cache_name
                    )
                )
                status = (mdcc or {}).get("status") or {}
                return status if "targetNodes" in status and status["targetNodes"] == 0 else None

            # the tainted node is no target of the cache: no Job prepares it
            realstack.eventually(untargeted, "the cold cache to have no target node", explain=real_stack.describe)
            (pod,) = real_stack.ready_pods(f"{labels.ENDPOINT_LABEL}={name},{labels.COMPONENT}=model-server", 1)
            assert pod.spec.node_name == real_stack.node
            owner, preload = pod.status.init_container_statuses
            assert (owner.name, preload.name) == (preload_containers.OWNERSHIP_CONTAINER, deployments.INIT_CONTAINER)
            assert _terminated(owner).exit_code == 0
            terminated = _terminated(preload)
            assert terminated.exit_code == 0
            result = json.loads(terminated.message)
            assert result["reason"] == "Downloaded", result
            assert (result["bytes"], result["files"]) == (model.total_bytes, len(COLD_SIZES)), result
            log = real_core.read_namespaced_pod_log(pod.metadata.name, real_stack.namespace, container="worker")
            assert f"loaded {len(COLD_SIZES)} files, {model.total_bytes} bytes" in log, log
            jobs = client.BatchV1Api(real_stack.api).list_namespaced_job(real_stack.namespace).items
            ours = [j.metadata.name for j in jobs if (j.metadata.labels or {}).get(labels.MDCC_LABEL) == cache_label]
            assert not ours, ours

            # on the host: the cache the pod filled, owned by the non-root preload's uid, with the uploaded bytes
            cache_dir = host_path / "warmstart"
            tree = pathlib.Path(preloading.key_dir(str(host_path), key))
            weights = tree / preloading.MODEL_DIR_NAME
            for path in (cache_dir, tree, weights, *(weights / f.path for f in model.files)):
                assert (path.stat().st_uid, path.stat().st_gid) == (security.CACHE_UID, security.CACHE_UID), path
            for uploaded in model.files:
                digest = hashlib.sha256((weights / uploaded.path).read_bytes()).hexdigest()
                assert digest == uploaded.sha256, uploaded.path
            # the operator read the pod's own preload (it ran the operator's init container) and labelled the node,
            # so the next pod there is steered to it and counted warm
            label = nodelabels.weights_ready_label(key)
            realstack.eventually(
                lambda: (real_core.read_node(real_stack.node).metadata.labels or {}).get(label) == nodelabels.READY,
                "the node the model pod filled to be labelled ready",
                explain=real_stack.describe,
            )
            events = real_core.list_namespaced_event(
                real_stack.namespace, field_selector=f"involvedObject.name={name}"
            ).items
            filled = [e.message for e in events if e.reason == filling.REASON]
            assert filled and f"filled node {real_stack.node}" in filled[0], filled
    finally:
        # after the taint is gone: the cache's cleanup Job (it mounts the root) must be done before the test
        # removes that directory
        real_stack.remove_endpoints([name], keep_pods=before)
        realstack.eventually(
            lambda: (
                helming.get_or_none(
                    lambda: objects.get_namespaced_custom_object(
                        GROUP, VERSION, real_stack.namespace, MDCC_PLURAL, cache_name
                    )
                )
                is None
            ),
            "the cold cache and its cleanup Job to be gone",
            240,
            real_stack.describe,
        )
        shutil.rmtree(host_path, ignore_errors=True)
