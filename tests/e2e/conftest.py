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


@pytest.fixture(scope="module")
def real_images(real_clusters: Any) -> tuple[str, str]:
    """The project image and the shell-less image, built once (cached by content) and pushed to the current real-node
    cluster's registry."""
    cluster = real_clusters.get()
    registry = cluster.real.registry
    return pushing.push(imaging.project_image(), registry), pushing.push(imaging.shellless_image(), registry)


class RealStacks:
    """The chart on the session's current real-node cluster, installed once per cluster, uninstalled at the end."""

    def __init__(self, real_clusters: Any, helm: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._clusters = real_clusters
        self._helm = helm
        self._tmp = tmp_path_factory
        self._current: tuple[running.Cluster, client.ApiClient, realstack.Stack] | None = None

    def get(self) -> realstack.Stack:
        if self._current is not None:
            cluster, _, stack = self._current
            if running.running_cluster(cluster.dir) is not None:
                return stack
            self.close()  # another test stopped that cluster: its objects went with it
        cluster = self._clusters.get()
        registry = cluster.real.registry
        images = pushing.push(imaging.project_image(), registry), pushing.push(imaging.shellless_image(), registry)
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        stack = realstack.install(self._helm, cluster, api, *images, self._tmp.mktemp("real-stack"))
        self._current = (cluster, api, stack)
        return stack

    def close(self) -> None:
        current, self._current = self._current, None
        if current is None:
            return
        cluster, api, stack = current
        try:
            if running.running_cluster(cluster.dir) is not None:
                realstack.uninstall(self._helm, stack)
        finally:
            api.close()
            shutil.rmtree(stack.hostpath_root, ignore_errors=True)


@pytest.fixture(scope="session")
def real_stacks(
    real_clusters: Any, helm: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealStacks]:
    stacks = RealStacks(real_clusters, helm, tmp_path_factory)
    try:
        yield stacks
    finally:
        stacks.close()


@pytest.fixture(scope="module")
def real_stack(real_stacks: RealStacks) -> realstack.Stack:
    """The chart installed with the project image, its operator pod on the real node (see :class:`realstack.Stack`)."""
    return real_stacks.get()


@pytest.fixture(scope="module")
def real_core(real_stack: realstack.Stack) -> client.CoreV1Api:
    return client.CoreV1Api(real_stack.api)
