"""Chaos on the real node: the preload container SIGKILLed mid-download, the operator pod killed mid-reconcile.

Nothing is simulated: the kill is a real `kill -9` of the container's process on the host (the kubelet sees the
container die with 137), the download is from the real S3 server, and the invariants are read from the node's disk and
the API: the kill landed before the preload completed (the container died of it, nothing was published), the retry
took the resume path (its result keeps bytes of the killed run), the cache ends Ready with exactly the uploaded bytes
and no staging directory, the endpoint completes, and a killed operator comes back and finishes a reconcile it was in
the middle of (its Deployment created, its status not yet final: the node is cordoned so the pod waits until then).
When ``WARMSTART_CHAOS_RECORDS`` names a file, each scenario appends its figures to it as one JSON line (the chaos
suite's table reads them).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import realstack
import sourcefaults
from warmstart.api import GROUP, preloading
from warmstart.api.preloading import Reason
from warmstart.api.sources import ModelSourceConfig
from warmstart.api.states import EndpointState
from warmstart.render import jobs, keys, labels, names

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


@pytest.fixture
def created(real_stack: realstack.Stack) -> Iterator[list[str]]:
    """Names of the endpoints a test creates: removed afterwards, with their pods, so the next test finds the real
    node as this one found it."""
    before = {p.metadata.uid for p in client.CoreV1Api(real_stack.api).list_namespaced_pod(real_stack.namespace).items}
    names: list[str] = []
    yield names
    real_stack.remove_endpoints(names, before)


SIZES = {"config.json": 4096, **{f"model-0000{i}-of-00004.safetensors": 128 * realstack.MiB for i in range(1, 5)}}
GATE_BYTES = 256 * realstack.MiB  # what the source passes before it holds, until the kill has landed
KILL_AFTER = 128 * realstack.MiB  # staged bytes that the kill waits for (fewer than the gate passes)


def _record(scenario: str, converged: bool, seconds: float, leaks: list[str], note: str) -> None:
    path = os.environ.get("WARMSTART_CHAOS_RECORDS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            row = {"scenario": scenario, "converged": converged, "seconds": seconds, "leaks": leaks, "note": note}
            out.write(json.dumps(row) + "\n")


def _host_pids(pod_uid: str, *words: str) -> list[int]:
    """Host PIDs of the pod `pod_uid` (its cgroup names it) whose command line contains every word: the real node's
    containers run on this host, beside other processes with the same command lines that must not be touched."""
    marks = (pod_uid, pod_uid.replace("-", "_"))
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        line = b" ".join(argv).decode(errors="replace")
        if any(mark in cgroup for mark in marks) and all(word in line for word in words):
            found.append(int(entry.name))
    return found


def _running_pod_uid(stack: realstack.Stack, selector: str) -> str | None:
    pods = client.CoreV1Api(stack.api).list_namespaced_pod(stack.namespace, label_selector=selector).items
    running = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    return str(running[0].metadata.uid) if running else None


def _blocks(path: pathlib.Path) -> int:
    total = 0
    for file in path.rglob("*"):
        try:
            total += file.stat().st_blocks * 512 if file.is_file() else 0
        except OSError:
            pass
    return total


def _preload_results(stack: realstack.Stack, key: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """The terminated preload containers of cache `key`'s Jobs: pod uid -> (exit code, termination message)."""
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    selector = f"{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}"
    for pod in client.CoreV1Api(stack.api).list_namespaced_pod(stack.namespace, label_selector=selector).items:
        if not pod.metadata.name.startswith(f"preload-{key}-"):
            continue
        for status in pod.status.container_statuses or []:
            done = status.state.terminated if status.name == jobs.CONTAINER and status.state else None
            if done is not None:
                try:
                    body = json.loads(done.message or "{}")
                except ValueError:
                    body = {}
                found[str(pod.metadata.uid)] = (int(done.exit_code), body if isinstance(body, dict) else {})
    return found


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(8 * realstack.MiB):
            digest.update(chunk)
    return digest.hexdigest()


def test_preload_container_killed_mid_download_converges_to_a_whole_cache(
    real_stack: realstack.Stack, created: list[str], request: pytest.FixtureRequest
) -> None:
    name = "kill-preload"  # one of realstack.CACHE_ROOTS: the cache root must be an allowed one exactly
    created.append(name)
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{name}", SIZES, seed=11)
    host_path = str(real_stack.hostpath_root / name)
    manifest = realstack.sim_endpoint(
        name, real_stack, model, replicas=1, weights=True, host_path=host_path, router=False
    )
    # the source is the real S3 server behind a gate that passes half the model's bytes and then holds: the kill
    # always lands mid-download, however fast the first half arrives
    pod_url = urllib.parse.urlsplit(real_stack.real.s3.pod_url)
    gate = sourcefaults.Gate(pod_url.hostname or "", (pod_url.hostname or "", pod_url.port or 80), GATE_BYTES)
    request.addfinalizer(gate.close)
    manifest["spec"]["modelSourceConfig"]["s3Storage"]["endpointUrl"] = f"http://{pod_url.hostname}:{gate.port}"
    key = keys.weights_key_in(
        ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"]), host_path, real_stack.namespace, {}
    )
    real_stack.weights_keys.append(key)
    tree = pathlib.Path(preloading.key_dir(host_path, key))
    staging = tree / ".staging"
    real_stack.create_endpoint(manifest)

    realstack.eventually(
        lambda: _blocks(staging) > KILL_AFTER if staging.exists() else None,
        f"the preload to have written {KILL_AFTER // realstack.MiB} MiB",
        240,
        real_stack.describe,
    )
    uid = _running_pod_uid(real_stack, f"{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}")
    assert uid is not None, "no running preload pod"
    victims = _host_pids(uid, "preload", key)
    assert victims, "no preload process of this key on the host"
    written = _blocks(staging)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    # the kill landed before the preload completed: nothing was published, and the container died of the signal
    assert not (tree / "model").exists(), "the preload had published the cache before the kill: it did not land"
    code, _ = realstack.eventually(
        lambda: _preload_results(real_stack, key).get(uid), "the killed preload container terminated", 120
    )
    assert code == 128 + signal.SIGKILL, f"the killed preload container ended {code}, not by the kill"
    gate.open()

    def resumed() -> dict[str, Any] | None:
        done = [body for code, body in _preload_results(real_stack, key).values() if code == 0]
        return done[0] if done else None

    result = realstack.eventually(resumed, "the retried preload's result", 420, real_stack.describe)
    # the retry took the resume path: it kept (re-checked, did not fetch again) bytes the killed run had written
    assert result.get("reason") == Reason.DOWNLOADED.value, result
    assert 0 < int(result.get("kept") or 0) <= model.total_bytes, f"the retry did not resume: {result}"
    real_stack.wait_state(name, "DeploymentComplete", timeout=420)
    seconds = time.monotonic() - killed
    cache = tree / "model"
    leaks = [str(p) for p in tree.glob(".staging*")]
    for uploaded in model.files:
        assert _sha256(cache / uploaded.path) == uploaded.sha256, f"{uploaded.path} differs from what was uploaded"
    _record(
        "real node: preload container SIGKILLed mid-download",
        True,
        seconds,
        leaks,
        f"killed at {written / realstack.MiB:.0f} of {model.total_bytes / realstack.MiB:.0f} MiB; "
        f"resumed with {int(result['kept']) / realstack.MiB:.0f} MiB kept",
    )
    assert leaks == []


def _operator_pod(stack: realstack.Stack) -> Any:
    pods = [
        p
        for p in client.CoreV1Api(stack.api).list_namespaced_pod(stack.namespace).items
        if p.metadata.name.startswith(stack.deployment) and p.metadata.deletion_timestamp is None
    ]
    return pods[0] if len(pods) == 1 else None


def _mid_reconcile(stack: realstack.Stack, name: str) -> str | None:
    """The endpoint's state, when the operator has started its reconcile but not finished it: the endpoint carries
    the operator's finalizer, its Deployment exists with no replica available, and it is DeploymentInProgress."""
    body = stack.endpoint(name) or {}
    state = (body.get("status") or {}).get("state")
    if f"{GROUP}/warmstart" not in (body.get("metadata") or {}).get("finalizers", []):
        return None
    apps = client.AppsV1Api(stack.api)
    found = apps.list_namespaced_deployment(stack.namespace, field_selector=f"metadata.name={names.child_name(name)}")
    if not found.items or (found.items[0].status.available_replicas or 0) > 0:
        return None
    return str(state) if state == EndpointState.DEPLOYMENT_IN_PROGRESS else None


def test_operator_killed_mid_reconcile_comes_back_and_finishes_it(
    real_stack: realstack.Stack, created: list[str]
) -> None:
    pod = realstack.eventually(lambda: _operator_pod(real_stack), "one operator pod", 120, real_stack.describe)
    restarts = pod.status.container_statuses[0].restart_count
    name = f"kill-op-{int(time.time()) % 100000}"
    created.append(name)
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{name}", {"config.json": 64}, 5)
    manifest = realstack.sim_endpoint(
        name, real_stack, model, replicas=1, weights=False, host_path=str(real_stack.hostpath_root / name), router=False
    )
    core = client.CoreV1Api(real_stack.api)
    # the node cordoned, the model pod waits: the reconcile stays mid-way (Deployment created, status not final) for
    # as long as the test needs, instead of a sleep that may end before the reconcile starts or after it finished
    core.patch_node(real_stack.node, {"spec": {"unschedulable": True}})
    try:
        real_stack.create_endpoint(manifest)
        realstack.eventually(
            lambda: _mid_reconcile(real_stack, name), "the endpoint's reconcile under way", 120, real_stack.describe
        )
        victims = _host_pids(str(pod.metadata.uid), "warmstart", "operator")
        assert victims, "no operator process on the host"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        # still mid-reconcile after the kill: what is left of it is the restarted operator's work
        assert _mid_reconcile(real_stack, name), "the reconcile was not in progress when the operator was killed"
    finally:
        core.patch_node(real_stack.node, {"spec": {"unschedulable": False}})
    real_stack.wait_state(name, "DeploymentComplete", timeout=300)
    after_kill = time.monotonic() - killed
    pod = realstack.eventually(
        lambda: (p := _operator_pod(real_stack)) and p.status.container_statuses[0].restart_count > restarts and p,
        "the kubelet to restart the killed operator container",
        120,
    )

    # the pod itself deleted at once (a node drain without grace): the Deployment's new pod takes over
    client.CoreV1Api(real_stack.api).delete_namespaced_pod(
        pod.metadata.name, real_stack.namespace, grace_period_seconds=0
    )
    deleted = time.monotonic()
    objects = client.CustomObjectsApi(real_stack.api)
    objects.patch_namespaced_custom_object(
        realstack.GROUP, realstack.VERSION, real_stack.namespace, realstack.PLURAL, name, {"spec": {"replicas": 2}}
    )

    def scaled() -> bool:
        body = real_stack.endpoint(name) or {}
        status = body.get("status") or {}
        return status.get("state") == "DeploymentComplete" and status.get("replicas") == 2

    realstack.eventually(scaled, "the scale-out after the operator pod was deleted", 300, real_stack.describe)
    after_delete = time.monotonic() - deleted
    _record("real node: operator container SIGKILLed mid-reconcile", True, after_kill, [], f"{len(victims)} pids")
    _record("real node: operator pod deleted, then a scale-out", True, after_delete, [], "grace period 0")
