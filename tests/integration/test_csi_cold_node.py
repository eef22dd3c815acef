"""A model pod waiting on a cold node through the CSI driver brings the operator's preload there (real control plane).

With `cache.access: csi` no model pod downloads weights itself: its csi volume waits (the driver answers UNAVAILABLE)
until the node holds the cache. The operator's pod index sees a scheduled pod whose volume names the key, makes its
node a target of the cache whatever the cache's targeting says, and its own signed preload Job fills the node; the
node is labelled ready like any other. kwok ends the preload pods with the termination message a real preload writes
(the real driver and kubelet are exercised in tests/e2e/test_real_node_csi.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

import kube
import operating
from fleet import TIMEOUT, delete_all, job_nodes, render, wait_status
from fleet import mdcc as mdcc_manifest
from nodepool import NodePool
from test_weights_cache import crds, labeled  # noqa: F401 - crds is autouse: installs the CRDs
from warmstart.render import cache_volumes, labels

pytestmark = pytest.mark.cluster

SIGNING_KEY = "integration-signing-key-of-32-chars"


def _waiting_model_pod(name: str, node: str, key: str) -> dict[str, Any]:
    """A model pod as the Deployment renders it in csi mode, already scheduled onto `node`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {labels.COMPONENT: "model-server"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "model", "image": "model-server:1", "volumeMounts": [{"name": "model", "mountPath": "/m"}]}
            ],
            "volumes": [cache_volumes.csi_volume("model", key, write=False)],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def test_a_model_pod_on_a_node_outside_the_caches_targets_gets_the_node_filled(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(1)
    _, (cold,) = own_nodes.add(1)
    settings = render(cache_access="csi", job_signing_key=SIGNING_KEY)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=settings):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        status = wait_status(api_client, namespace, name, "ready on its one target", state="Ready", readyNodes=1)
        key = status["key"]
        assert job_nodes(api_client, namespace) == sorted(targets)
        assert cold not in labeled(api_client, key)

        client.CoreV1Api(api_client).create_namespaced_pod(namespace, _waiting_model_pod("model-0", cold, key))

        wait_status(api_client, namespace, name, "the cold node filled", state="Ready", readyNodes=2, targetNodes=2)
        assert job_nodes(api_client, namespace) == sorted([*targets, cold])
        kube.wait_for(lambda: cold in labeled(api_client, key), TIMEOUT, what="the cold node labelled ready")
        delete_all(api_client, namespace)
