"""The CI share of the chaos suite on the real control plane (chaos/; `make chaos` runs 20 operator kills and more).

The operator (its own process) SIGKILLed once during each phase: the seed reconcile, a source-change rollout and a
deletion; and a preload pod evicted mid-preload. Each run must converge with no duplicate Jobs or DaemonSets and no
node label or finalizer leaks.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kubernetes import client

import chaos_nodes
import chaos_operator
import kube
from chaos_report import failures

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


@pytest.mark.parametrize("phase", chaos_operator.PHASES)
def test_operator_sigkill_converges_without_leaks(
    cluster: Any, api_client: client.ApiClient, tmp_path: pathlib.Path, phase: str
) -> None:
    run = chaos_operator.one_run(api_client, pathlib.Path(cluster.kubeconfig), tmp_path, phase, seed=7)
    assert run.ok, "\n".join(failures([run]) + [p.read_text()[-3000:] for p in tmp_path.glob("operator-*.log")])


def test_evicted_preload_pod_is_replaced_and_the_cache_completes(
    cluster: Any, api_client: client.ApiClient, tmp_path: pathlib.Path
) -> None:
    run = chaos_nodes.one_run(api_client, pathlib.Path(cluster.kubeconfig), tmp_path, "evict", seed=7)
    assert run.ok, "\n".join(failures([run]))
