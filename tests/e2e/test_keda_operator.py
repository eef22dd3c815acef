"""The real KEDA operator turns warmstart's ScaledObject into an HPA that targets the endpoint's scale subresource.

Real: KEDA's operator, built from the pinned Go module (`warmstart.localcluster.keda`, cached by version) and run as
a host process against the local cluster with its own CRDs; the API server; warmstart's operator (in-process). KEDA's
gRPC metrics service gets the local cluster's PKI as its certificates. Not exercised: the metrics themselves (no
Prometheus runs, so the HPA reports its metric as unknown); the HPA controller of kube-controller-manager does run.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.localcluster import certs as localcerts
from warmstart.localcluster import keda

pytestmark = [pytest.mark.cluster, pytest.mark.keda]
#: the test's timeout covers waiting for a cold KEDA build (~12 min on 2 idle cores, more beside other work)
KEDA_BUILD_SECONDS = 2700

AUTOSCALING = {
    "minReplicaCount": 2,
    "maxReplicaCount": 5,
    "pollingInterval": 5,
    "prometheusTrigger": {
        "name": "router-queue-depth",
        "serverAddress": "http://prometheus.monitoring.svc:9090",
        "query": "sum(warmstart_router_queue_depth)",
        "targetValue": 4,
        "metricType": "Value",
    },
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def keda_operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """KEDA's CRDs applied, and its operator running as a host process; both removed afterwards."""
    kubeconfig = str(cluster.kubeconfig)
    kube.install_crds(kubeconfig)
    args = [a for p in keda.crd_paths() for a in ("-f", str(p))]
    kube.kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", *args)
    kube.kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *args)
    namespace = "keda-e2e"
    kube.kubectl(kubeconfig, "create", "namespace", namespace, check=False)
    work = tmp_path_factory.mktemp("keda")
    certs = work / "certs"
    certs.mkdir()
    pki = localcerts.Pki(pathlib.Path(cluster.dir) / "pki")
    shutil.copy(pki.ca_cert, certs / "ca.crt")
    shutil.copy(pki.serving_cert, certs / "tls.crt")
    shutil.copy(pki.serving_key, certs / "tls.key")
    ports = {name: _free_port() for name in ("metrics", "health", "grpc")}
    keda.binary()  # built once per version: waits for CI's background build (the test's own timeout allows for it)
    log = (work / "keda.log").open("wb")
    process = subprocess.Popen(
        keda.operator_command(pathlib.Path(kubeconfig), certs, ports),
        env={**os.environ, **keda.operator_env(namespace)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        # while KEDA runs: it removes its finalizer from each ScaledObject (and deletes its HPA); without it the
        # ScaledObjects, their namespaces and KEDA's CRDs would hang on that finalizer
        kube.kubectl(kubeconfig, "delete", "scaledobjects.keda.sh", "--all", "-A", "--wait=true", "--timeout=60s")
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        kube.kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
        kube.delete_crds(kubeconfig, [str(p) for p in keda.crd_paths()])
        print(f"KEDA operator log: {work / 'keda.log'}")


def _hpa(api: client.ApiClient, namespace: str) -> Any:
    items = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    return items[0] if items else None


@pytest.mark.timeout(KEDA_BUILD_SECONDS)
def test_keda_turns_the_scaled_object_into_an_hpa_on_the_endpoint(
    cluster: Any, api_client: client.ApiClient, namespace: str, keda_operator: subprocess.Popen[bytes]
) -> None:
    manifest = ep.endpoint_manifest(
        "scaled",
        namespace,
        "ml.g5.8xlarge",
        modelCacheConfig={"weightsCache": {"enabled": False}},
        autoScalingSpec=AUTOSCALING,
    )
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        kube.apply(str(cluster.kubeconfig), manifest)
        hpa = kube.wait_for(lambda: _hpa(api_client, namespace), timeout=120, what="KEDA's HPA")
        assert keda_operator.poll() is None, "the KEDA operator exited"
        assert hpa.metadata.name == "keda-hpa-scaled"
        target = hpa.spec.scale_target_ref
        assert (target.api_version, target.kind, target.name) == (
            f"{ep.GROUP}/{ep.VERSION}",
            "InferenceEndpointConfig",
            "scaled",
        )
        assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 5)
        # KEDA's HPA metric is an external metric served by KEDA's metrics adapter (not run here)
        assert [m.type for m in hpa.spec.metrics] == ["External"]
        assert hpa.spec.behavior.scale_down.stabilization_window_seconds == 300
        # KEDA reads the scale subresource of the endpoint and marks the ScaledObject Ready
        ready = kube.wait_for(
            lambda: next(
                (
                    c
                    for c in (
                        client.CustomObjectsApi(api_client)
                        .get_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects", "scaled")
                        .get("status", {})
                        .get("conditions")
                        or []
                    )
                    if c["type"] == "Ready" and c["status"] == "True"
                ),
                None,
            ),
            timeout=60,
            what="the ScaledObject Ready",
        )
        assert ready["reason"]
        status = ep.status(api_client, namespace, "scaled")
        assert ep.condition(status, "Autoscaling")["status"] == "True"
