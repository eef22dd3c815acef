"""A Job a tenant creates with the operator's labels cannot mark a node cache-ready (real control plane, kwok pods).

The cache targets two nodes. The operator's own preloads run for 10 minutes, so on the first node the only Job that
could finish is the forged one: it carries the cache's labels, the owner-uid annotation, an owner reference to the
cache (a plain one, and one that claims to be the controller), and a successful preload result as its termination
message, all of which any tenant can copy from the API. kwok completes it at once. Then, as a positive control, the
operator's genuine Job on the second node is let finish: once that node is labelled and counted (so the operator has
reconciled after the forged Job completed), the first node must still be unlabelled and uncounted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

import kube
import operating
from fleet import DOWNLOADED, render
from nodepool import NodePool
from test_weights_cache import crds, labeled, mdcc_manifest, status_of  # noqa: F401 - crds is an autouse fixture
from warmstart.api import API_VERSION
from warmstart.api.caches import MDCC_KIND
from warmstart.render import jobs, labels

pytestmark = pytest.mark.cluster


def forged_job(namespace: str, cache: dict[str, Any], node: str, name: str, *, controller: bool) -> dict[str, Any]:
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
                {
                    "apiVersion": API_VERSION,
                    "kind": MDCC_KIND,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": controller,
                }
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        "sim.warmstart.io/duration": "1s",
                        "sim.warmstart.io/termination-message": json.dumps(DOWNLOADED),
                    },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": jobs.CONTAINER, "image": "busybox", "command": ["true"]}],
                },
            },
        },
    }


@pytest.mark.parametrize("controller", [False, True], ids=["owner-reference", "controller-reference"])
def test_a_tenant_job_with_the_operators_labels_does_not_mark_a_node_ready(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool, controller: bool
) -> None:
    instance_type, (forged_node, genuine_node) = own_nodes.add(2)
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render("600s")):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        cache = kube.wait_for(lambda: kube.get_custom(api_client, namespace, "modeldatacacheconfigs", name))
        key = name.removeprefix("weights-")
        forged = jobs.preload_job_name(key, forged_node, 2)  # the name the operator would give its next attempt
        batch.create_namespaced_job(namespace, forged_job(namespace, cache, forged_node, forged, controller=controller))
        kube.wait_for(
            lambda: any(
                c.type == "Complete" and c.status == "True"
                for c in batch.read_namespaced_job(forged, namespace).status.conditions or []
            ),
            what="the forged Job complete",
        )
        # positive control: the operator's own Job on the other node finishes now (kwok restarts the delay)
        selector = f"{labels.NODE_LABEL}={genuine_node},{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}"
        genuine = kube.wait_for(
            lambda: core.list_namespaced_pod(namespace, label_selector=selector).items, what="the genuine preload pod"
        )
        for pod in genuine:
            core.patch_namespaced_pod(
                pod.metadata.name, namespace, {"metadata": {"annotations": {"sim.warmstart.io/duration": "1s"}}}
            )
        kube.wait_for(
            lambda: (
                genuine_node in labeled(api_client, key)
                and status_of(api_client, namespace, name).get("readyNodes") == 1
            ),
            what="the genuine node labelled and counted",
        )
        assert forged_node not in labeled(api_client, key)
        assert status_of(api_client, namespace, name).get("readyNodes") == 1
        nodes = {n["node"]: n["state"] for n in status_of(api_client, namespace, name).get("nodes") or []}
        assert nodes.get(forged_node) != "Ready" and nodes.get(genuine_node) == "Ready"


#: the operator's own preloads run for 10 minutes: only a forged Job can finish within a test
SLOW = render("600s")


def test_a_tenant_job_with_the_operators_name_and_a_controller_reference_does_not_mark_a_node_ready(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    """The tenant is first: before the operator runs, it creates the Job of attempt 1 under the operator's own field
    manager name. Its creator, its uid and its template are not the operator's: it never counts, and the operator's
    apply of that name is refused by the API server (the template is immutable). Positive control: the cache's second
    node gets the operator's own Job, which is let finish; once that node is labelled and counted (the operator has
    reconciled with the forged Job complete all along), the forged Job's node must be neither."""
    instance_type, (node, genuine_node) = own_nodes.add(2)
    batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
    cache = kube.wait_for(lambda: kube.get_custom(api_client, namespace, "modeldatacacheconfigs", name))
    key = name.removeprefix("weights-")
    forged = jobs.preload_job_name(key, node, 1)
    batch.create_namespaced_job(
        namespace, forged_job(namespace, cache, node, forged, controller=True), field_manager="warmstart"
    )
    kube.wait_for(
        lambda: any(
            c.type == "Complete" and c.status == "True"
            for c in batch.read_namespaced_job(forged, namespace).status.conditions or []
        ),
        what="the forged Job complete",
    )
    with operating.operator(str(cluster.kubeconfig), [namespace], render=SLOW):
        selector = f"{labels.NODE_LABEL}={genuine_node},{labels.ROLE_LABEL}={jobs.ROLE_PRELOAD}"
        genuine = kube.wait_for(
            lambda: core.list_namespaced_pod(namespace, label_selector=selector).items, what="the genuine preload pod"
        )
        for pod in genuine:  # kwok restarts the pod's delay: the operator's own Job completes now
            core.patch_namespaced_pod(
                pod.metadata.name, namespace, {"metadata": {"annotations": {"sim.warmstart.io/duration": "1s"}}}
            )
        kube.wait_for(
            lambda: (
                genuine_node in labeled(api_client, key)
                and status_of(api_client, namespace, name).get("readyNodes", 0) >= 1
            ),
            what="the operator's own Job's node labelled and counted",
        )
        assert node not in labeled(api_client, key)
        status = status_of(api_client, namespace, name)
        assert status.get("readyNodes") == 1
        states = {n["node"]: n["state"] for n in status.get("nodes") or []}
        assert states.get(genuine_node) == "Ready" and states.get(node) != "Ready", states


def test_a_tenant_job_swapped_in_for_the_operators_running_job_does_not_mark_a_node_ready(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    """The tenant deletes the operator's (slow) Job and creates its own of the same name, controller reference and
    field manager: its uid is not the one the API server gave the operator's Job."""
    instance_type, (node,) = own_nodes.add(1)
    batch = client.BatchV1Api(api_client)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=SLOW):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        cache = kube.wait_for(lambda: kube.get_custom(api_client, namespace, "modeldatacacheconfigs", name))
        key = name.removeprefix("weights-")
        own = jobs.preload_job_name(key, node, 1)
        kube.wait_for(lambda: batch.list_namespaced_job(namespace, field_selector=f"metadata.name={own}").items)
        forged = forged_job(namespace, cache, node, own, controller=True)
        for _ in range(10):  # the operator re-creates its Job quickly: delete and create back to back until we win
            try:
                batch.delete_namespaced_job(own, namespace, propagation_policy="Background")
            except client.ApiException as error:
                if error.status != 404:
                    raise
            try:
                batch.create_namespaced_job(namespace, forged, field_manager="warmstart")
                break
            except client.ApiException as error:
                if error.status != 409:
                    raise
        else:
            pytest.fail("the operator re-created its Job every time before the tenant's")
        forged_uid = batch.read_namespaced_job(own, namespace).metadata.uid

        def forged_done_or_replaced() -> bool:
            """The forged Job completed, or the operator already took its name back (its template differs)."""
            found = batch.list_namespaced_job(namespace, field_selector=f"metadata.name={own}").items
            if not found or found[0].metadata.uid != forged_uid:
                return True
            return any(c.type == "Complete" and c.status == "True" for c in found[0].status.conditions or [])

        kube.wait_for(forged_done_or_replaced, what="the forged Job complete or replaced")
        # positive control: the operator's own Job holds the name again (a new uid), so the operator has read the
        # forged one and acted on it; meanwhile the node was never counted ready
        kube.wait_for(
            lambda: any(
                j.metadata.uid != forged_uid
                for j in batch.list_namespaced_job(namespace, field_selector=f"metadata.name={own}").items
            ),
            what="the operator's own Job back under its name",
        )
        assert node not in labeled(api_client, key)
        assert status_of(api_client, namespace, name).get("readyNodes", 0) == 0
