"""End-to-end set-up: the same REAL control plane and helm fixtures as everywhere (tests/conftest.py), and the chart
installed on the real node.

The cluster, API client and per-test namespace fixtures come from tests/conftest.py, shared with the integration
tests, so one session starts at most one cluster and WARMSTART_KUBECONFIG works the same way (reuse a running one).

Two kinds of e2e test:

- On kwok nodes (test_helm_chart.py, test_examples.py, test_peering.py): the operator runs as a separate PROCESS
  (`warmstart operator`, with the chart's environment, authenticated as the chart's ServiceAccount so the chart's RBAC
  is what it gets), because kwok runs no containers. Preload Jobs "succeed" with the termination message that a pod
  annotation asks for.
- On the REAL node (test_real_node_*.py, marker ``realnode``): nothing is simulated. The project image is built from
  the Dockerfile and pushed to the local registry; helm installs the chart with it, and the operator pod, the preload
  Jobs, the pre-pull DaemonSets, the model pods (`warmstart sim` reading the cache) and the routers all run in
  containers on a real kubelet, downloading from a real S3 server (versitygw). ``real_stack`` installs the chart once
  per session (one namespace, one bucket, one hostPath directory) and removes all of it at the end.

Deliberately NOT faked anywhere: helm (the real binary, built from Go modules), the API server with its admission,
RBAC and CRD validation, the controllers and the scheduler.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

import realstack
from warmstart.localcluster import imaging, pushing, running


@pytest.fixture(scope="session")
def real_images(real_clusters: Any) -> tuple[str, str]:
    """The project image and the shell-less image, built once (cached by content) and pushed to the local registry."""
    cluster = real_clusters.get()
    registry = cluster.real.registry
    return pushing.push(imaging.project_image(), registry), pushing.push(imaging.shellless_image(), registry)


@pytest.fixture(scope="session")
def real_stack(
    real_clusters: Any, real_images: tuple[str, str], helm: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[realstack.Stack]:
    """The chart installed with the project image, its operator pod on the real node (see :class:`realstack.Stack`)."""
    cluster = real_clusters.get()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    stack = realstack.install(helm, cluster, api, *real_images, tmp_path_factory.mktemp("real-stack"))
    try:
        yield stack
    finally:
        try:
            if running.running_cluster(cluster.dir) is not None:
                realstack.uninstall(helm, stack)
            # else a later test (tests/integration/test_real_node.py) stopped this cluster for a fresh start: its
            # objects went with it, and only the host directory is left to remove
        finally:
            api.close()
            shutil.rmtree(stack.hostpath_root, ignore_errors=True)


@pytest.fixture(scope="session")
def real_core(real_stack: realstack.Stack) -> client.CoreV1Api:
    return client.CoreV1Api(real_stack.api)
