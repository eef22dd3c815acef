"""Shared fixtures: one REAL Kubernetes control plane for the whole test session (integration and e2e alike).

Sets up etcd, kube-apiserver (client certs, RBAC), kube-controller-manager and kube-scheduler,
built from the Go module proxy (see docs/localcluster.md), plus kwok with warmstart's stages and
six fake GPU nodes (4 x ml.g5.24xlarge, 2 x ml.p5.48xlarge). If ``WARMSTART_KUBECONFIG`` names
the kubeconfig of a running local cluster (``warmstart cluster up``), that one is reused and left
running; otherwise a cluster is started in a temporary directory and stopped at the end.

Deliberately NOT faked: the API server with its validation, admission and RBAC; scheduling; and
the controllers (Deployment, ReplicaSet, Job, DaemonSet, garbage collection, namespaces, ...).
Simulated by kwok: the kubelets. No container runs and no image is pulled; pods move through
their phases by stage rules that pod annotations steer (``sim.warmstart.io/*``, see
operator/warmstart/localcluster/stages/pod.yaml).

The cluster is shared by every test: a test that needs other nodes creates its own with
``warmstart.localcluster.nodes.create_nodes(..., prefix=<unique>)`` and deletes them afterwards.
"""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client, config

from warmstart.localcluster import building, running, versions


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing binaries before any test runs, outside pytest-timeout's per-test budget."""
    wanted = any(item.get_closest_marker("cluster") for item in session.items)
    if wanted and not os.environ.get("WARMSTART_KUBECONFIG") and building.missing():
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("building the local cluster from Go modules, first time only (~30 min)")
        building.ensure_binaries()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[running.Cluster]:
    """The running local cluster (``.kubeconfig``, ``.dir``, ``.server``)."""
    reused = os.environ.get("WARMSTART_KUBECONFIG")
    if reused:
        kubeconfig = pathlib.Path(reused).resolve()
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        yield running.Cluster(dir=kubeconfig.parent, kubeconfig=kubeconfig, server=server)
        return
    directory = tmp_path_factory.mktemp("cluster")
    started = running.up(directory)
    try:
        yield started
    finally:
        running.down(directory)


@pytest.fixture(scope="session")
def api_client(cluster: running.Cluster) -> Iterator[client.ApiClient]:
    """A ``kubernetes.client.ApiClient`` authenticated as the cluster admin (system:masters)."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists; deleted (not awaited) after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name, "labels": {"warmstart.io/test": "true"}}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30 s"
        time.sleep(0.1)
    try:
        yield name
    finally:
        _release_finalizers(api_client, name)
        core.delete_namespace(name, propagation_policy="Background")


def _release_finalizers(api: client.ApiClient, namespace: str) -> None:
    """Drop warmstart finalizers left by a test that stopped its operator first, so the namespace can go away."""
    objects = client.CustomObjectsApi(api)
    group, version = "inference.sagemaker.aws.amazon.com", "v1"
    for plural in ("inferenceendpointconfigs", "jumpstartmodels", "modeldatacacheconfigs", "modelimagecaches"):
        try:
            items = objects.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except client.ApiException:
            continue  # CRDs not installed by this test
        for item in items:
            if item["metadata"].get("finalizers"):
                objects.patch_namespaced_custom_object(
                    group, version, namespace, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                )


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    """The helm binary of the local cluster's toolchain, built (helm only) if missing."""
    path = building.binary_path("helm", versions.HELM)
    if not path.is_file():
        building.build_one(versions.HELM_BUILD)
    return path
