"""A Job a tenant creates with the operator's labels cannot mark a node cache-ready (real control plane, kwok pods).

The operator's own preload runs for 10 minutes, so the only Job that could finish is the forged one: it carries the
cache's labels, the owner-uid annotation and a (non-controller) owner reference to the cache, copied from the API as
any tenant can. kwok completes it at once; the node must stay unlabelled and the cache must not count it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

import kube
import operating
from nodepool import NodePool
from test_weights_cache import crds, labeled, mdcc_manifest, status_of  # noqa: F401 - crds is an autouse fixture
from warmstart.api import API_VERSION
from warmstart.api.caches import MDCC_KIND
from warmstart.render import jobs, labels

pytestmark = pytest.mark.cluster

SLOW = {"preload_pod_annotations": {"sim.warmstart.io/duration": "600s"}, "operator_image": "warmstart:test"}


def forged_job(namespace: str, cache: dict[str, Any], node: str, name: str) -> dict[str, Any]:
    meta = cache["metadata"]
    pod_labels = {labels.MDCC_LABEL: meta["name"], labels.NODE_LABEL: node, labels.ROLE_LABEL: jobs.ROLE_PRELOAD}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**pod_labels, jobs.ATTEMPT_LABEL: "1"},
            "annotations": {jobs.OWNER_UID_ANNOTATION: meta["uid"], jobs.GENERATION_ANNOTATION: "1"},
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": MDCC_KIND, "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {"sim.warmstart.io/duration": "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": jobs.CONTAINER, "image": "busybox", "command": ["true"]}],
                },
            },
        },
    }


def test_a_tenant_job_with_the_operators_labels_does_not_mark_a_node_ready(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, (node,) = own_nodes.add(1)
    batch = client.BatchV1Api(api_client)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=SLOW):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        cache = kube.wait_for(lambda: kube.get_custom(api_client, namespace, "modeldatacacheconfigs", name))
        key = name.removeprefix("weights-")
        forged = jobs.preload_job_name(key, node, 2)  # the name the operator would give its next attempt
        batch.create_namespaced_job(namespace, forged_job(namespace, cache, node, forged))
        kube.wait_for(
            lambda: any(
                c.type == "Complete" and c.status == "True"
                for c in batch.read_namespaced_job(forged, namespace).status.conditions or []
            ),
            what="the forged Job complete",
        )
        time.sleep(8)  # several resync intervals (2 s) for the operator to (wrongly) act on them
        assert node not in labeled(api_client, key)
        assert status_of(api_client, namespace, name).get("readyNodes", 0) == 0
