"""Scenario 1: SIGKILL the operator at a random point of the seed reconcile, a source-change rollout or a deletion.

Each run gets a fresh namespace and three fresh kwok nodes of a run-unique instance type. The phase starts (an endpoint
created, its source changed, or it deleted), the operator is SIGKILLed after a random delay, a new operator process
starts, and the run waits for the converged state:

- seed: the endpoint DeploymentComplete, its weights cache Ready on every node;
- rollout: DeploymentComplete on the new weights cache, the old cache gone;
- deletion: the endpoint and both caches gone, the Deployment and DaemonSet gone.

Invariants, sampled throughout and at the end: never two active preload Jobs for one (cache, node) nor two DaemonSets
for one image cache; at the end no node cache label without a live cache and no object held by a finalizer.
Time to converge is measured from the restart.
"""

from __future__ import annotations

import pathlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

import chaos_cluster as cc
from chaos_report import Run, cycle
from endpointing import endpoint_manifest
from nodepool import NodePool
from warmstart.api import GROUP, VERSION

PHASES = ("seed", "rollout", "deletion")
PLURAL = "inferenceendpointconfigs"
CONVERGE_TIMEOUT = 150.0
NAME = "chaos"


def scenario(phase: str) -> str:
    return f"operator SIGKILL during {phase}"


def _endpoint(api: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, NAME
        )
        return body
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _complete(api: client.ApiClient, namespace: str, location: str) -> bool:
    body = _endpoint(api, namespace)
    if body is None:
        return False
    status = body.get("status") or {}
    if status.get("state") != "DeploymentComplete" or body["metadata"].get("generation") != (
        (next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {}) or {}).get("observedGeneration")
    ):
        return False
    if body["spec"]["modelSourceConfig"]["modelLocation"] != location:
        return False
    caches = cc.custom_objects(api, namespace, "modeldatacacheconfigs")
    ready = [c for c in caches if (c.get("status") or {}).get("state") == "Ready"]
    return len(caches) == 1 and len(ready) == 1


def _gone(api: client.ApiClient, namespace: str) -> bool:
    if _endpoint(api, namespace) is not None:
        return False
    if any(cc.custom_objects(api, namespace, p) for p in cc.PLURALS[1:]):
        return False
    apps = client.AppsV1Api(api)
    return not apps.list_namespaced_deployment(namespace).items and not apps.list_namespaced_daemon_set(namespace).items


class Sampler:
    """Checks the duplicate-object invariants every half second in the background."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.found: set[str] = set()
        #: the most preload Jobs seen active at once
        self.peak_active = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                active = cc.active_preloads(self.api, self.namespace)
                self.peak_active = max(self.peak_active, len(active))
                self.found.update(cc.duplicate_jobs(self.api, self.namespace, active))
                self.found.update(cc.duplicate_daemonsets(self.api, self.namespace))
            except Exception:  # noqa: BLE001 - the API server may be down on purpose; sample again later
                pass

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(5)
        return sorted(self.found)


def one_run(api: client.ApiClient, kubeconfig: pathlib.Path, log_dir: pathlib.Path, phase: str, seed: int) -> Run:
    rng = random.Random(seed)
    namespace = cc.fresh_namespace(api)
    pool = NodePool(api, prefix="chaos")
    operator = cc.OperatorProcess(kubeconfig, namespace, log_dir, preload_duration=f"{rng.uniform(1, 3):.1f}s")
    custom = client.CustomObjectsApi(api)
    violations: list[str] = []
    try:
        instance_type, nodes = pool.add(3, gpus=8, nvme=3_800_000_000_000)
        body = endpoint_manifest(NAME, namespace, instance_type, replicas=1)
        location = body["spec"]["modelSourceConfig"]["modelLocation"]
        operator.start()
        if phase != "seed":  # converge first, untimed
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            ok, _ = cc.poll(lambda: _complete(api, namespace, location), CONVERGE_TIMEOUT)
            if not ok:
                return Run(scenario(phase), seed, False, 0.0, [], ["the endpoint never converged before the fault"])
        sampler = Sampler(api, namespace)
        delay = rng.uniform(0.0, 6.0)
        if phase == "seed":
            time.sleep(rng.uniform(0.0, 3.0))  # the operator may still be starting: a kill during its start-up too
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            converged: Callable[[], bool] = lambda: _complete(api, namespace, location)  # noqa: E731
        elif phase == "rollout":
            location = location + "-v2"
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, NAME, {"spec": {"modelSourceConfig": {"modelLocation": location}}}
            )
            converged = lambda: _complete(api, namespace, location)  # noqa: E731
        else:
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
            converged = lambda: _gone(api, namespace)  # noqa: E731
        time.sleep(delay)
        operator.kill()
        operator.start()
        ok, seconds = cc.poll(converged, CONVERGE_TIMEOUT)
        time.sleep(1.0)  # a last sample after convergence
        violations += sampler.stop()
        leaks = cc.label_leaks(api, namespace, nodes) + cc.finalizer_leaks(api, namespace)
        if phase == "deletion":
            core = client.CoreV1Api(api)
            for node in nodes:
                left = [k for k in core.read_node(node).metadata.labels if k.startswith("cache.")]
                leaks += [f"{node}: {k} after deletion" for k in left]
        return Run(scenario(phase), seed, bool(ok), seconds, leaks, violations, f"killed {delay:.1f} s in")
    finally:
        operator.stop()
        try:
            if _endpoint(api, namespace) is not None or any(cc.custom_objects(api, namespace, p) for p in cc.PLURALS):
                operator.start()  # let the operator release its finalizers and labels before the nodes go
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
                cc.poll(lambda: _gone(api, namespace), 60)
                operator.stop()
        except client.ApiException:
            pass
        pool.delete_all()
        cc.drop_namespace(api, namespace)


def run_all(
    api: client.ApiClient,
    kubeconfig: pathlib.Path,
    log_dir: pathlib.Path,
    runs: int,
    seed: int,
    deadline: float,
    report: Callable[[Run], None],
) -> list[Run]:
    return cycle(
        PHASES, runs, seed, deadline, lambda variant, seed: one_run(api, kubeconfig, log_dir, variant, seed), report
    )


def clean_up(api: client.ApiClient, namespace: str, operator: cc.OperatorProcess, pool: NodePool) -> None:
    """After a run: delete the endpoint while the operator still runs (it lets go of its finalizers and labels), then
    stop the operator and remove the run's nodes and namespace."""
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
        cc.poll(lambda: _gone(api, namespace), 60)
    except client.ApiException:
        pass
    operator.stop()
    pool.delete_all()
    cc.drop_namespace(api, namespace)
