"""Scenario 2: kube-apiserver, then etcd, SIGKILLed and restarted in the middle of a reconcile.

The local cluster's own process (same binary, flags, environment, ports and data directory, recorded in the
cluster's state.json so `warmstart cluster down` still stops it) is killed while the operator reconciles a new
endpoint and a router (`warmstart router` in its own process) follows a model Service's EndpointSlices (kept by the
EndpointSlice controller for two kwok pods, the only slices a router trusts) and its ConfigMap.

Invariants after the restart: the operator finishes the reconcile (DeploymentComplete, cache Ready) and reacts to a
change made after the restart (a scale to 2 replicas); the router sees an EndpointSlice change (a second pod) and a
strategy change made after the restart, through its watches; no duplicate Jobs/DaemonSets, no leaked labels or
finalizers.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client

import chaos_cluster as cc
from chaos_operator import NAME, PLURAL, Sampler, _complete, clean_up
from chaos_report import Run, cycle
from endpointing import endpoint_manifest
from nodepool import NodePool
from warmstart.api import GROUP, VERSION
from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.localcluster.clusterstate import State

SERVICE = "model"
CONFIGMAP = "model-router"
WATCH_TIMEOUT = 120.0


def scenario(component: str) -> str:
    return f"{component} SIGKILLed and restarted mid-reconcile"


def restart(directory: pathlib.Path, component: str, down_seconds: float) -> None:
    """SIGKILL `component` of the cluster in `directory`, wait `down_seconds`, start it again as it was started."""
    state = State.load(directory)
    assert state is not None, f"no cluster in {directory}"
    pid = state.pids[component]
    argv = [a.decode() for a in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    env = dict(
        line.decode().split("=", 1)
        for line in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if b"=" in line
    )
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while state.alive(component) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(down_seconds)
    state.launch(directory, component, argv, env=env)


def _api_ready(api: client.ApiClient) -> bool:
    try:
        client.CoreV1Api(api).list_namespace(limit=1, _request_timeout=3)
        return True
    except Exception:  # noqa: BLE001 - not ready yet, whatever the client says
        return False


def _service() -> dict[str, Any]:
    """The model Service; the EndpointSlice controller keeps its slices (the only ones the router trusts)."""
    return {
        "metadata": {"name": SERVICE},
        "spec": {"selector": {"app": SERVICE}, "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}]},
    }


def _model_pod(name: str, node: str) -> dict[str, Any]:
    """A pod the Service selects, bound to a kwok node (kwok gives it an IP and makes it Ready)."""
    return {
        "metadata": {"name": name, "labels": {"app": SERVICE}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "model", "image": "model:chaos", "ports": [{"name": "http", "containerPort": 8000}]}
            ],
        },
    }


def _ready_ip(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return str(pod.status.pod_ip) if ready and pod.status.pod_ip else None


def _configmap(strategy: str) -> dict[str, Any]:
    return {"metadata": {"name": CONFIGMAP}, "data": {CONFIGMAP_KEY: RouterConfig(strategy=strategy).to_yaml()}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RouterProcess:
    """`warmstart router` following the Service `model` and the ConfigMap `model-router` of a namespace."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, log: pathlib.Path) -> None:
        self.port, self.admin = _free_port(), _free_port()
        argv = [sys.executable, "-m", "warmstart.cli", "router", "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["--admin-port", str(self.admin), "--namespace", namespace, "--service", SERVICE]
        argv += ["--configmap", CONFIGMAP, "--kubeconfig", str(kubeconfig)]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/router/status", timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except OSError:
            return None

    def sees(self, addresses: list[str], strategy: str) -> bool:
        status = self.status()
        if status is None:
            return False
        urls = sorted(b["url"] for b in status["backends"])
        return urls == sorted(f"http://{a}:8000" for a in addresses) and status["strategy"] == strategy

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def one_run(api: client.ApiClient, directory: pathlib.Path, log_dir: pathlib.Path, component: str, seed: int) -> Run:
    rng = random.Random(seed)
    kubeconfig = directory / "kubeconfig"
    namespace = cc.fresh_namespace(api)
    pool = NodePool(api, prefix="cp")
    operator = cc.OperatorProcess(kubeconfig, namespace, log_dir, preload_duration="3s")
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    router: RouterProcess | None = None
    violations: list[str] = []
    try:
        instance_type, nodes = pool.add(3, gpus=8, nvme=3_800_000_000_000)
        core.create_namespaced_service(namespace, _service())
        core.create_namespaced_pod(namespace, _model_pod("model-a", nodes[0]))
        core.create_namespaced_config_map(namespace, _configmap("random"))
        router = RouterProcess(kubeconfig, namespace, log_dir / f"router-{namespace}.log")
        operator.start()
        first, _ = cc.poll(lambda: _ready_ip(core, namespace, "model-a"), 60)
        ok, _ = cc.poll(lambda: bool(first) and router.sees([str(first)], "random"), 60)  # type: ignore[union-attr]
        if not ok:
            violations.append("the router never saw the first EndpointSlice")
        body = endpoint_manifest(NAME, namespace, instance_type, replicas=1)
        location = body["spec"]["modelSourceConfig"]["modelLocation"]
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        sampler = Sampler(api, namespace)
        time.sleep(rng.uniform(0.5, 4.0))  # mid-reconcile: preload Jobs run for 3 s
        restart(directory, component, down_seconds=rng.uniform(1.0, 5.0))
        restarted = time.monotonic()
        cc.poll(lambda: _api_ready(api), 60)
        # changes made after the restart: only a live watch (or a re-list) can see them
        core.create_namespaced_pod(namespace, _model_pod("model-b", nodes[1]))
        core.patch_namespaced_config_map(CONFIGMAP, namespace, _configmap("roundrobin"))
        second, _ = cc.poll(lambda: _ready_ip(core, namespace, "model-b"), 60)
        both = [str(first), str(second)]
        seen, router_seconds = cc.poll(lambda: router.sees(both, "roundrobin"), WATCH_TIMEOUT)  # type: ignore[union-attr]
        if not seen:
            violations.append(f"the router did not see changes made after the restart in {WATCH_TIMEOUT:.0f} s")
        done, _ = cc.poll(lambda: _complete(api, namespace, location), WATCH_TIMEOUT)
        if done:
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME, {"spec": {"replicas": 2}})

            def scaled() -> bool:
                status = (cc.custom_objects(api, namespace, PLURAL) or [{}])[0].get("status") or {}
                return status.get("replicas") == 2 and status.get("state") == "DeploymentComplete"

            done, _ = cc.poll(scaled, WATCH_TIMEOUT)
            if not done:
                violations.append("the operator did not act on a scale made after the restart")
        seconds = time.monotonic() - restarted
        violations += sampler.stop()
        leaks = cc.label_leaks(api, namespace, nodes) + cc.finalizer_leaks(api, namespace)
        endpoint = (cc.custom_objects(api, namespace, PLURAL) or [{}])[0].get("status") or {}
        note = f"router caught up {router_seconds:.1f} s after the restart; endpoint {endpoint.get('state')}"
        return Run(scenario(component), seed, bool(done) and bool(seen), seconds, leaks, violations, note)
    finally:
        if router is not None:
            router.stop()
        clean_up(api, namespace, operator, pool)


def run_all(
    api: client.ApiClient,
    directory: pathlib.Path,
    log_dir: pathlib.Path,
    runs: int,
    seed: int,
    deadline: float,
    report: Callable[[Run], None],
) -> list[Run]:
    return cycle(
        ("kube-apiserver", "etcd"),
        runs,
        seed,
        deadline,
        lambda variant, seed: one_run(api, directory, log_dir, variant, seed),
        report,
    )
