"""Cluster-side helpers of the chaos suite: the operator as a killable process, and the invariants read from the API.

The operator runs as `warmstart operator` in its own process (so SIGKILL is a real crash, not a cancelled task),
restricted to one namespace, with kwok preload pods that succeed after a simulated duration. The invariant checks
look only at the API server: duplicate active Jobs or DaemonSets, node cache labels with no live cache behind them,
objects stuck with a deletion timestamp (a finalizer leak).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

from warmstart.api import GROUP, VERSION, nodelabels
from warmstart.render import jobs, labels

T = TypeVar("T")
PLURALS = ("inferenceendpointconfigs", "modeldatacacheconfigs", "modelimagecaches")


class OperatorProcess:
    """`warmstart operator` watching one namespace; `kill()` is SIGKILL, `start()` starts a fresh one."""

    def __init__(
        self,
        kubeconfig: pathlib.Path,
        namespace: str,
        log_dir: pathlib.Path,
        preload_duration: str,
        *,
        extra_env: dict[str, str] | None = None,
        tag: str = "",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_dir = log_dir
        self.tag = tag
        self.env = {
            **os.environ,
            "WARMSTART_RESYNC_SECONDS": "2",
            "WARMSTART_OPERATOR_IMAGE": "warmstart:chaos",
            "WARMSTART_PRELOAD_POD_ANNOTATIONS": json.dumps({"sim.warmstart.io/duration": preload_duration}),
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log: pathlib.Path | None = None

    def start(self) -> None:
        self.starts += 1
        self.log = self.log_dir / f"operator-{self.namespace}{self.tag}-{self.starts}.log"
        log = open(self.log, "wb")  # noqa: SIM115 - the child's
        argv = [sys.executable, "-m", "warmstart.cli", "operator", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--namespace", self.namespace, "--metrics-port", "0", "--health-port", "0"]
        self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """A clean stop (SIGTERM, then SIGKILL after 20 s)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def poll(probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> tuple[T | None, float]:
    """Poll until `probe` is truthy; (the value or None, seconds waited)."""
    started = time.monotonic()
    while True:
        value = probe()
        if value:
            return value, time.monotonic() - started
        if time.monotonic() - started > timeout:
            return None, time.monotonic() - started
        time.sleep(interval)


def fresh_namespace(api: client.ApiClient) -> str:
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"warmstart.io/test": "chaos"}}})
    poll(lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items, 30, 0.1)
    return name


def drop_namespace(api: client.ApiClient, namespace: str) -> None:
    """Delete the namespace; first strip warmstart finalizers a killed operator may have left."""
    custom = client.CustomObjectsApi(api)
    for plural in PLURALS:
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
            if item["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                )
    client.CoreV1Api(api).delete_namespace(namespace, propagation_policy="Background")


def custom_objects(api: client.ApiClient, namespace: str, plural: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural
    )["items"]
    return items


def _active(job: Any) -> bool:
    if job.metadata.deletion_timestamp is not None:
        return False
    finished = {c.type for c in job.status.conditions or [] if c.status == "True"} & {"Complete", "Failed"}
    return not finished


def active_preloads(api: client.ApiClient, namespace: str) -> list[Any]:
    """The namespace's preload Jobs that are neither finished nor being deleted."""
    selector = f"{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}"
    found = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector).items
    return [j for j in found if _active(j)]


def duplicate_jobs(api: client.ApiClient, namespace: str, active: list[Any] | None = None) -> list[str]:
    """More than one active preload Job for one (cache, node); `active` as active_preloads gives it, or read."""
    active = active_preloads(api, namespace) if active is None else active
    counts = Counter(
        (j.metadata.labels.get(labels.MDCC_LABEL), j.metadata.labels.get(labels.NODE_LABEL)) for j in active
    )
    return [f"{n} active preload Jobs for {cache} on {node}" for (cache, node), n in counts.items() if n > 1]


def duplicate_daemonsets(api: client.ApiClient, namespace: str) -> list[str]:
    found = client.AppsV1Api(api).list_namespaced_daemon_set(namespace, label_selector=labels.MIC_LABEL).items
    counts = Counter(d.metadata.labels.get(labels.MIC_LABEL) for d in found if d.metadata.deletion_timestamp is None)
    return [f"{n} DaemonSets for image cache {cache}" for cache, n in counts.items() if n > 1]


def label_leaks(api: client.ApiClient, namespace: str, nodes: list[str]) -> list[str]:
    """Cache labels on `nodes` whose cache no longer exists (or is being deleted) in `namespace`."""
    live = {
        item["metadata"]["name"]
        for plural in PLURALS[1:]
        for item in custom_objects(api, namespace, plural)
        if not item["metadata"].get("deletionTimestamp")
    }
    leaks = []
    core = client.CoreV1Api(api)
    for name in nodes:
        try:
            node = core.read_node(name)
        except client.ApiException:
            continue
        for label in node.metadata.labels or {}:
            if label.startswith(nodelabels.CACHE_PREFIX + "/"):
                cache = label.split("/", 1)[1]  # weights-<key> / image-<key>: the cache's name
                if cache not in live:
                    leaks.append(f"{name}: {label}")
    return leaks


def finalizer_leaks(api: client.ApiClient, namespace: str) -> list[str]:
    """Objects that are being deleted but still held by a finalizer."""
    out = []
    for plural in PLURALS:
        for item in custom_objects(api, namespace, plural):
            meta = item["metadata"]
            if meta.get("deletionTimestamp") and meta.get("finalizers"):
                out.append(f"{plural}/{meta['name']} held by {meta['finalizers']}")
    return out


def leaks(api: client.ApiClient, namespace: str, nodes: list[str]) -> list[str]:
    return (
        duplicate_jobs(api, namespace)
        + duplicate_daemonsets(api, namespace)
        + label_leaks(api, namespace, nodes)
        + finalizer_leaks(api, namespace)
    )
