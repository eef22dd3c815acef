"""Chaos on the real node: the preload container SIGKILLed mid-download, the operator pod killed mid-reconcile.

Nothing is simulated: the kill is a real `kill -9` of the container's process on the host (the kubelet sees the
container die with 137), the download is from the real S3 server, and the invariants are read from the node's disk and
the API: the cache ends Ready with exactly the uploaded bytes and no staging directory, the endpoint completes, and a
killed operator comes back and finishes a reconcile it was in the middle of. When ``WARMSTART_CHAOS_RECORDS`` names a
file, each scenario appends its figures to it as one JSON line (the chaos suite's table reads them).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import realstack
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import jobs, keys, labels

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


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(8 * realstack.MiB):
            digest.update(chunk)
    return digest.hexdigest()


def test_preload_container_killed_mid_download_converges_to_a_whole_cache(
    real_stack: realstack.Stack, created: list[str]
) -> None:
    name = "kill-preload"  # one of realstack.CACHE_ROOTS: the cache root must be an allowed one exactly
    created.append(name)
    model = realstack.upload_model(real_stack.real.s3, real_stack.bucket, f"models/{name}", SIZES, seed=11)
    host_path = str(real_stack.hostpath_root / name)
    manifest = realstack.sim_endpoint(
        name, real_stack, model, replicas=1, weights=True, host_path=host_path, router=False
    )
    key = keys.weights_key_in(
        ModelSourceConfig.model_validate(manifest["spec"]["modelSourceConfig"]), host_path, real_stack.namespace, {}
    )
    real_stack.weights_keys.append(key)
    weights = pathlib.Path(host_path) / "warmstart" / "weights"
    staging = weights / f".staging-{key}"
    real_stack.create_endpoint(manifest)

    realstack.eventually(
        lambda: _blocks(staging) > 32 * realstack.MiB if staging.exists() else None,
        "the preload to have written 32 MiB",
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
    assert not (weights / key).exists() or written >= model.total_bytes, "the cache was published before it was whole"

    real_stack.wait_state(name, "DeploymentComplete", timeout=420)
    seconds = time.monotonic() - killed
    cache = weights / key
    leaks = [str(p) for p in weights.glob(f".staging-{key}*")]
    for uploaded in model.files:
        assert _sha256(cache / uploaded.path) == uploaded.sha256, f"{uploaded.path} differs from what was uploaded"
    _record(
        "real node: preload container SIGKILLed mid-download",
        True,
        seconds,
        leaks,
        f"killed at {written / realstack.MiB:.0f} of {model.total_bytes / realstack.MiB:.0f} MiB",
    )
    assert leaks == []


def _operator_pod(stack: realstack.Stack) -> Any:
    pods = [
        p
        for p in client.CoreV1Api(stack.api).list_namespaced_pod(stack.namespace).items
        if p.metadata.name.startswith(stack.deployment) and p.metadata.deletion_timestamp is None
    ]
    return pods[0] if len(pods) == 1 else None


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
    real_stack.create_endpoint(manifest)
    time.sleep(1.0)  # mid-reconcile: the endpoint's first handler is running or queued
    victims = _host_pids(str(pod.metadata.uid), "warmstart", "operator")
    assert victims, "no operator process on the host"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
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
