"""Helpers for the end-to-end tests: run helm, mint a ServiceAccount kubeconfig, run the operator as a process."""

from __future__ import annotations

import base64
import os
import pathlib
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client

import kube

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "warmstart"
WARMSTART = pathlib.Path(sys.executable).with_name("warmstart")


def run_helm(
    helm: pathlib.Path, kubeconfig: pathlib.Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(helm), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=300
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def chart_environment(api: client.ApiClient, namespace: str, deployment: str) -> dict[str, str]:
    """The environment the chart gives the operator container: its literal values, and its `secretKeyRef`s read from
    the Secrets the chart created (as the kubelet would; the CSI driver's Job signing key is one)."""
    body = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace)
    (container,) = body.spec.template.spec.containers
    env = {e.name: e.value for e in container.env or [] if e.value is not None}
    for entry in container.env or []:
        ref = entry.value_from.secret_key_ref if entry.value_from else None
        if ref is not None:
            secret = client.CoreV1Api(api).read_namespaced_secret(ref.name, namespace)
            env[entry.name] = base64.b64decode(secret.data[ref.key]).decode()
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class OperatorProcess:
    """A `warmstart operator` process and its log file."""

    process: subprocess.Popen[bytes]
    log: pathlib.Path
    health_port: int

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@contextmanager
def operator_process(
    kubeconfig: pathlib.Path, env: dict[str, str], log: pathlib.Path, pod_id: str
) -> Iterator[OperatorProcess]:
    """Run `warmstart operator` with the chart's environment until the block ends; wait until /healthz answers."""
    health = free_port()
    full_env = {
        **os.environ,
        **env,
        "POD_ID": pod_id,
        "WARMSTART_HEALTH_PORT": str(health),
        "WARMSTART_METRICS_PORT": str(free_port()),
        "KUBECONFIG": str(kubeconfig),
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(WARMSTART), "operator", "--kubeconfig", str(kubeconfig)],
            env=full_env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    running = OperatorProcess(process, log, health)
    try:
        kube.wait_for(
            lambda: running.healthy() or process.poll() is not None,
            what=f"operator {pod_id} to answer /healthz",
            timeout=90,
        )
        assert process.poll() is None, f"operator {pod_id} exited with {process.returncode}:\n{running.tail()}"
        yield running
    finally:
        running.stop()


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def get_or_none(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
