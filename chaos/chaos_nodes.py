"""Scenario 3: node faults in the middle of a preload, on kwok nodes: a node deleted, a node NotReady, a pod evicted.

Each run: three fresh kwok nodes, an endpoint whose preload pods take a few seconds, and once the preload pods run,
one fault:

- delete: one target node is deleted; the cache must become Ready on the two left, the endpoint DeploymentComplete,
  and no active preload Job may be left for the deleted node;
- notready: kwok stops managing one node and its Ready condition turns False for a while, then it comes back; the cache
  must end Ready on all three;
- evict: one preload pod is evicted through the Eviction API; the cache must end Ready on all three.

Always: no duplicate active Jobs, no label or finalizer leaks. Time to converge is measured from the fault.
"""

from __future__ import annotations

import datetime
import pathlib
import random
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

import chaos_cluster as cc
from chaos_operator import NAME, PLURAL, Sampler, clean_up
from chaos_report import Run, cycle
from endpointing import endpoint_manifest
from nodepool import NodePool
from warmstart.api import GROUP, VERSION
from warmstart.render import jobs, labels

FAULTS = ("delete", "notready", "evict")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
TIMEOUT = 150.0


def scenario(fault: str) -> str:
    return {
        "delete": "node deleted mid-preload",
        "notready": "node NotReady mid-preload (then back)",
        "evict": "preload pod evicted mid-preload",
    }[fault]


def _preload_pods(api: client.ApiClient, namespace: str) -> list[Any]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="job-name").items
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def _done(api: client.ApiClient, namespace: str, nodes: int) -> bool:
    body = (cc.custom_objects(api, namespace, PLURAL) or [{}])[0]
    caches = cc.custom_objects(api, namespace, "modeldatacacheconfigs")
    if len(caches) != 1:
        return False
    status = caches[0].get("status") or {}
    endpoint = body.get("status") or {}
    return (
        status.get("state") == "Ready"
        and status.get("readyNodes") == status.get("targetNodes") == nodes
        and endpoint.get("state") == "DeploymentComplete"
    )


def _orphan_jobs(api: client.ApiClient, namespace: str, gone: str) -> list[str]:
    found = client.BatchV1Api(api).list_namespaced_job(
        namespace, label_selector=f"{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD},{labels.NODE_LABEL}={gone}"
    )
    return [
        f"active preload Job {j.metadata.name} for the deleted node"
        for j in found.items
        if j.metadata.deletion_timestamp is None and not (j.status.succeeded or j.status.failed)
    ]


def _not_ready(api: client.ApiClient, node: str) -> None:
    core = client.CoreV1Api(api)
    core.patch_node(node, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "chaos: kubelet stopped",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def one_run(api: client.ApiClient, kubeconfig: pathlib.Path, log_dir: pathlib.Path, fault: str, seed: int) -> Run:
    rng = random.Random(seed)
    namespace = cc.fresh_namespace(api)
    pool = NodePool(api, prefix="nf")
    operator = cc.OperatorProcess(kubeconfig, namespace, log_dir, preload_duration="6s")
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    violations: list[str] = []
    leaks: list[str] = []
    try:
        instance_type, nodes = pool.add(3, gpus=8, nvme=3_800_000_000_000)
        operator.start()
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, endpoint_manifest(NAME, namespace, instance_type, replicas=1)
        )
        sampler = Sampler(api, namespace)
        running, _ = cc.poll(lambda: _preload_pods(api, namespace), 90, 0.2)
        if not running:
            return Run(scenario(fault), seed, False, 0.0, [], ["no preload pod ever ran"])
        time.sleep(rng.uniform(0.0, 3.0))
        victim = rng.choice(nodes)
        expected = 3
        faulted = time.monotonic()
        if fault == "delete":
            core.delete_node(victim)
            pool.created.remove(victim)
            expected = 2
        elif fault == "notready":
            _not_ready(api, victim)
            time.sleep(rng.uniform(5.0, 15.0))
            core.patch_node(victim, {"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}})
        else:
            pods = [p for p in _preload_pods(api, namespace)] or running
            pod = rng.choice(pods)
            victim = pod.spec.node_name
            eviction = {"metadata": {"name": pod.metadata.name, "namespace": namespace}}
            core.create_namespaced_pod_eviction(pod.metadata.name, namespace, eviction)
        ok, seconds = cc.poll(lambda: _done(api, namespace, expected), TIMEOUT)
        if fault == "notready":
            seconds = time.monotonic() - faulted
        violations += sampler.stop()
        leaks += cc.label_leaks(api, namespace, nodes) + cc.finalizer_leaks(api, namespace)
        if fault == "delete":
            leaks += _orphan_jobs(api, namespace, victim)
        cache = (cc.custom_objects(api, namespace, "modeldatacacheconfigs") or [{}])[0].get("status") or {}
        note = f"victim {victim}; cache {cache.get('state')} {cache.get('readyNodes')}/{cache.get('targetNodes')}"
        return Run(scenario(fault), seed, bool(ok), seconds, leaks, violations, note)
    finally:
        clean_up(api, namespace, operator, pool)


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
        FAULTS, runs, seed, deadline, lambda variant, seed: one_run(api, kubeconfig, log_dir, variant, seed), report
    )
