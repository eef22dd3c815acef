"""What the operator scale benches share: the operator as a child process, its request counter, a cache to create,
and the clean-up after a run (bench/operator_scale.py and bench/fleet_scale.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from warmstart.api import API_VERSION, GROUP, VERSION
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL
from warmstart.api.sources import ModelSourceConfig
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.placement import GB, instance_type_affinity
from warmstart.render import keys

DOWNLOADED = {
    "outcome": "Succeeded",
    "reason": "Downloaded",
    "message": "ok",
    "bytes": 16 * GB,
    "seconds": 2.0,
    "files": 7,
    "retryable": False,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int, metric: str, labels: tuple[str, ...]) -> dict[str, float]:
    """A counter of the operator's /metrics summed by `labels` (joined with a space), e.g. ("method",)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            key = " ".join(line.split(f'{label}="', 1)[1].split('"', 1)[0] for label in labels)
            found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def scrape_requests(port: int, by: tuple[str, ...] = ("method",)) -> dict[str, int]:
    """The operator's controllers' API requests so far, by method (or by `by`: ("method", "resource"))."""
    return {key: int(value) for key, value in scrape(port, "warmstart_api_requests_total", by).items()}


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """after - before, per key, without the keys that did not move."""
    moved = {key: after.get(key, 0) - before.get(key, 0) for key in sorted(set(after) | set(before))}
    return {key: value for key, value in moved.items() if value}


@contextlib.contextmanager
def operator_process(
    kubeconfig: str,
    namespace: str,
    metrics_port: int,
    log: Path,
    settings: dict[str, str] | None = None,
    wrap: list[str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator as a child process (under `wrap`, e.g. a profiler, when given)."""
    annotations = {"sim.warmstart.io/duration": "2s", "sim.warmstart.io/termination-message": json.dumps(DOWNLOADED)}
    env = {
        **os.environ,
        "WARMSTART_OPERATOR_IMAGE": "warmstart:bench",
        "WARMSTART_PRELOAD_POD_ANNOTATIONS": json.dumps(annotations),
        **(settings or {}),
    }
    command = [
        *(wrap or []),
        sys.executable,
        "-m",
        "warmstart.cli",
        "operator",
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        namespace,
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(free_port()),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    scrape_requests(metrics_port)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"operator did not start; see {log}") from None
                    time.sleep(0.5)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def mdcc(namespace: str, index: int, instance_type: str) -> dict[str, Any]:
    source = {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "bench-bucket", "region": "us-west-2"},
        "modelLocation": f"models/m{index}",
    }
    key = keys.weights_key_in(ModelSourceConfig.model_validate(source), "/opt/dlami/nvme", namespace, {})
    name = keys.weights_cache_name(key)
    spec = {"modelSourceConfig": source, "nodeAffinity": instance_type_affinity([instance_type]).to_api()}
    return {
        "apiVersion": API_VERSION,
        "kind": MDCC_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def cleanup(api: client.ApiClient, namespace: str, created: list[str]) -> None:
    """The operator is stopped: strip finalizers so the namespace can go, then delete the nodes."""
    custom = client.CustomObjectsApi(api)
    for plural in (MDCC_PLURAL, "inferenceendpointconfigs"):
        with contextlib.suppress(client.ApiException):
            for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
                with contextlib.suppress(client.ApiException):
                    custom.patch_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                    )
    with contextlib.suppress(client.ApiException):
        client.CoreV1Api(api).delete_namespace(namespace, propagation_policy="Background")
    kwok_nodes.delete_nodes(api, created, parallelism=32)
