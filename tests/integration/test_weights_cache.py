"""The weights cache on the real control plane: the real Job, scheduler and garbage-collector controllers, kwok pods.

Every test creates its own kwok nodes with a test-unique instance type, so counts are exact on a shared cluster, and
runs the operator in-process restricted to its namespace. Preload pods do not download anything: kwok ends them after
`sim.warmstart.io/duration` with the exit code and termination message their annotations ask for, which is exactly
what the controller reads from a real preload container. Every test deletes its caches while the operator still
runs, so the finalizer never blocks the namespace's deletion.
"""

from __future__ import annotations

import contextvars
import json
import time
from typing import Any

import kopf
import pytest
from kopf._core.engines import posting as kopf_posting
from kubernetes import client

import kube
import operating
from fleet import TIMEOUT, delete_all, job_nodes, preload_jobs, render, status_of
from fleet import mdcc as mdcc_manifest
from nodepool import NodePool
from warmstart.api import GROUP, VERSION, nodelabels
from warmstart.api.caches import MDCC_PLURAL, ModelDataCacheConfigSpec
from warmstart.controllers import nodes, preloading, waking
from warmstart.controllers.settings import OperatorSettings
from warmstart.controllers.storage import Store
from warmstart.localcluster import nodes as kwok_nodes
from warmstart.placement import GB
from warmstart.render import jobs, labels
from warmstart.render.context import RenderContext

pytestmark = pytest.mark.cluster

NOT_FOUND = {
    "outcome": "Failed",
    "reason": "NotFound",
    "message": "s3://example-bucket/models/llama: no objects",
    "bytes": 0,
    "seconds": 0.2,
    "files": 0,
    "retryable": False,
}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def get_mdcc(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get_custom(api, namespace, MDCC_PLURAL, name)


def wait_state(api: client.ApiClient, namespace: str, name: str, state: str, **counts: int) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        return status if status.get("state") == state and all(status.get(k) == v for k, v in counts.items()) else None

    return kube.wait_for(probe, TIMEOUT, what=f"MDCC {name} {state} {counts}")


def key_of(name: str) -> str:
    return name.removeprefix("weights-")


def labeled(api: client.ApiClient, key: str) -> set[str]:
    selector = f"{nodelabels.weights_ready_label(key)}={nodelabels.READY}"
    return {n.metadata.name for n in client.CoreV1Api(api).list_node(label_selector=selector).items}


def events_for(api: client.ApiClient, namespace: str, name: str) -> list[Any]:
    return list(
        client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    )


def config_map(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """A stand-in parent; returns its parentReference."""
    made = client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": made.metadata.uid}


def test_four_nodes_become_ready_and_a_fifth_joins(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(4)
    _, bystanders = own_nodes.add(1)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render()):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        key = key_of(name)
        status = wait_state(api_client, namespace, name, "Ready", readyNodes=4, targetNodes=4)
        assert labeled(api_client, key) == set(targets)
        assert job_nodes(api_client, namespace) == sorted(targets)
        assert status["key"] == key and status["observedGeneration"] == 1
        assert (
            status["modelSizeBytes"] == 16 * GB
            and status["bytesDone"] == 4 * 16 * GB
            and status["bytesTotal"] == 4 * 16 * GB
        )
        assert {n["node"]: (n["state"], n["reason"], n["bytes"]) for n in status["nodes"]} == {
            t: ("Ready", "Downloaded", 16 * GB) for t in targets
        }
        assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]
        assert not set(bystanders) & labeled(api_client, key)

        _, joined = own_nodes.add(1, start=4, instance_type=instance_type)
        wait_state(api_client, namespace, name, "Ready", readyNodes=5, targetNodes=5)
        kube.wait_for(
            lambda: labeled(api_client, key) == set(targets + joined), TIMEOUT, what="label on the fifth node"
        )
        assert job_nodes(api_client, namespace) == sorted(targets + joined)
        delete_all(api_client, namespace)


def test_node_deleted_mid_download_drops_out_of_the_target_count(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(3)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render(duration="20s")):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        wait_state(api_client, namespace, name, "Downloading", targetNodes=3, readyNodes=0)
        kube.wait_for(lambda: job_nodes(api_client, namespace) == sorted(targets), TIMEOUT, what="three preload Jobs")
        leaving = targets[0]
        kwok_nodes.delete_node(api_client, leaving)
        wait_state(api_client, namespace, name, "Downloading", targetNodes=2)
        kube.wait_for(
            lambda: leaving not in job_nodes(api_client, namespace), TIMEOUT, what="the leaving node's Job deleted"
        )
        status = wait_state(api_client, namespace, name, "Ready", readyNodes=2, targetNodes=2)
        assert {n["node"] for n in status["nodes"]} == set(targets[1:])
        assert labeled(api_client, key_of(name)) == set(targets[1:])
        delete_all(api_client, namespace)


def test_permanent_failure_fails_the_cache_with_the_reason_and_events(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    parent = config_map(api_client, namespace, "endpoint-a")
    hooks = {"sim.warmstart.io/exit-code": "66", "sim.warmstart.io/termination-message": json.dumps(NOT_FOUND)}
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render()):
        name = kube.create_custom(
            api_client, mdcc_manifest(namespace, [instance_type], podAnnotations=hooks, parentReferences=[parent])
        )
        status = wait_state(api_client, namespace, name, "Failed", readyNodes=0, targetNodes=2)

        def both_failed() -> dict[str, Any] | None:
            found = status_of(api_client, namespace, name)
            nodes = found.get("nodes") or []
            return found if len(nodes) == 2 and all(n["state"] == "Failed" for n in nodes) else None

        status = kube.wait_for(both_failed, TIMEOUT, what="both nodes Failed")
        assert {n["reason"] for n in status["nodes"]} == {"NotFound"}
        assert all("no objects" in n["message"] for n in status["nodes"])
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and ready["reason"] == "NotFound"
        assert "NotFound" in status["message"]
        kube.wait_for(
            lambda: any(
                e.reason == "NotFound" and e.type == "Warning" for e in events_for(api_client, namespace, name)
            ),
            60,
            what="Event on the cache",
        )
        kube.wait_for(
            lambda: any(e.reason == "NotFound" for e in events_for(api_client, namespace, parent["name"])),
            60,
            what="Event on the parent",
        )
        time.sleep(5)  # permanent: no retry, one Job per node
        assert job_nodes(api_client, namespace) == sorted(targets)
        assert not labeled(api_client, key_of(name))
        delete_all(api_client, namespace)


def test_two_parents_share_one_cache_and_the_last_one_leaving_cleans_up(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    first, second = config_map(api_client, namespace, "endpoint-a"), config_map(api_client, namespace, "endpoint-b")
    manifest = mdcc_manifest(namespace, [instance_type], parentReferences=[first, second])
    manifest["metadata"]["ownerReferences"] = [{**p, "blockOwnerDeletion": False} for p in (first, second)]
    core = client.CoreV1Api(api_client)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render(duration="2s")):
        name = kube.create_custom(api_client, manifest)
        key = key_of(name)
        wait_state(api_client, namespace, name, "Ready", readyNodes=2, targetNodes=2)
        kube.wait_for(lambda: labeled(api_client, key) == set(targets), TIMEOUT, what="labels")

        # one parent leaves: the endpoint controller drops its reference, garbage collection its ownerReference
        core.delete_namespaced_config_map(first["name"], namespace)
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, MDCC_PLURAL, name, {"spec": {"parentReferences": [second]}}
        )
        wait_state(api_client, namespace, name, "Ready", readyNodes=2, observedGeneration=2)
        assert labeled(api_client, key) == set(targets) and get_mdcc(api_client, namespace, name) is not None

        # the last parent leaves: garbage collection deletes the cache, the finalizer cleans the nodes
        core.delete_namespaced_config_map(second["name"], namespace)
        seen: set[str] = set()
        deadline = time.monotonic() + TIMEOUT
        while get_mdcc(api_client, namespace, name) is not None:
            assert time.monotonic() < deadline, f"cache not released; cleanup Jobs seen on {seen}"
            for job in preload_jobs(api_client, namespace, jobs.ROLE_CLEANUP):
                seen.add(job.metadata.labels[labels.NODE_LABEL])
                assert job.spec.template.spec.containers[0].args[:3] == ["preload", "--delete", key]
            time.sleep(0.2)
        assert seen == set(targets)
        assert not labeled(api_client, key)
        kube.wait_for(
            lambda: not preload_jobs(api_client, namespace, jobs.ROLE_CLEANUP), TIMEOUT, what="cleanup Jobs deleted"
        )


def test_operator_restart_mid_download_creates_no_duplicates_and_converges(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(3)
    kubeconfig = str(cluster.kubeconfig)
    with operating.operator(kubeconfig, [namespace], render=render(duration="10s")):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        kube.wait_for(lambda: job_nodes(api_client, namespace) == sorted(targets), TIMEOUT, what="three preload Jobs")
    before = {j.metadata.name: j.metadata.uid for j in preload_jobs(api_client, namespace)}
    with operating.operator(kubeconfig, [namespace], render=render(duration="10s")):
        wait_state(api_client, namespace, name, "Ready", readyNodes=3, targetNodes=3)
        after = {j.metadata.name: j.metadata.uid for j in preload_jobs(api_client, namespace)}
        assert after == before
        assert labeled(api_client, key_of(name)) == set(targets)
        delete_all(api_client, namespace)


def test_model_too_big_for_a_node_type_reports_insufficient_capacity_and_creates_no_job(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    big_type, big = own_nodes.add(2, nvme=4000 * GB)
    small_type, small = own_nodes.add(1, nvme=100 * GB)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render()):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [big_type, small_type], modelSizeBytes=500 * GB))
        status = wait_state(api_client, namespace, name, "Failed", readyNodes=2, targetNodes=3)
        by_node = {n["node"]: n for n in status["nodes"]}
        assert by_node[small[0]]["state"] == "Failed" and by_node[small[0]]["reason"] == "InsufficientCapacity"
        assert "does not fit" in by_node[small[0]]["message"]
        assert job_nodes(api_client, namespace) == sorted(big)
        assert labeled(api_client, key_of(name)) == set(big)
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "InsufficientCapacity"
        delete_all(api_client, namespace)


def test_removed_label_is_checked_again_by_a_new_preload_not_restored_blindly(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(1)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render()):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        key = key_of(name)
        wait_state(api_client, namespace, name, "Ready", readyNodes=1, targetNodes=1)
        client.CoreV1Api(api_client).patch_node(
            targets[0], {"metadata": {"labels": {nodelabels.weights_ready_label(key): None}}}
        )

        def second_attempt() -> list[Any]:
            return [j for j in preload_jobs(api_client, namespace) if j.metadata.labels[jobs.ATTEMPT_LABEL] == "2"]

        kube.wait_for(second_attempt, TIMEOUT, what="a second preload Job")
        status = wait_state(api_client, namespace, name, "Ready", readyNodes=1, targetNodes=1)
        kube.wait_for(
            lambda: labeled(api_client, key) == set(targets), TIMEOUT, what="label back after the new preload"
        )
        assert status["nodes"][0]["attempts"] == 2
        kube.wait_for(
            lambda: len(preload_jobs(api_client, namespace)) == 1, TIMEOUT, what="the first attempt's Job deleted"
        )
        delete_all(api_client, namespace)


def _facts(node: dict[str, Any]) -> nodes.NodeFacts:
    meta = node["metadata"]
    return nodes.node_facts(meta["name"], meta.get("labels") or {}, meta.get("annotations") or {}, node)[meta["name"]]


def _reconcile_with_view(api: client.ApiClient, body: dict[str, Any], view: list[nodes.NodeFacts]) -> None:
    """One reconcile of a cache by a process that has just taken over (it applied no Job yet) and whose node index
    is `view`, with no Job in its Job index: what a standby replica acts on when it resumes after its peer died
    and kopf's re-list has not reached its indexes yet. Against the real API server."""
    settings = OperatorSettings(render=RenderContext(**render()))
    memo = kopf.Memo(store=Store(api), settings=settings, wakeups=waking.Wakeups())
    indexes: preloading.Indexes = (
        {n.name: [n] for n in view},
        {},
        {},
        {},
        {view[0].labels[nodelabels.INSTANCE_TYPE]: [n.name for n in view]},
    )
    spec = ModelDataCacheConfigSpec.model_validate(body["spec"])
    posting = kopf.OperatorSettings()
    posting.posting.enabled = False  # no kopf handler context here to post Events from

    def run() -> None:
        kopf_posting.settings_var.set(posting)
        preloading.reconcile(body, spec, memo, indexes)

    contextvars.copy_context().run(run)


def test_a_standby_resuming_with_a_view_from_before_the_labels_preloads_no_ready_node_again(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    """A standby that lists the nodes, pauses, and resumes when its peer dies may act once on that old view: nodes
    without the ready label and no Jobs. Status says Ready there, so the live nodes decide: none labelled gets a
    second preload Job; a node whose label a user really removed does (preloaded again, as documented)."""
    instance_type, targets = own_nodes.add(2)
    core = client.CoreV1Api(api_client)
    view = [_facts(api_client.sanitize_for_serialization(core.read_node(n))) for n in targets]  # before the cache
    kubeconfig = str(cluster.kubeconfig)
    with operating.operator(kubeconfig, [namespace], render=render()):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        wait_state(api_client, namespace, name, "Ready", readyNodes=2, targetNodes=2)
    key = key_of(name)
    warmed = {j.metadata.name: j.metadata.uid for j in preload_jobs(api_client, namespace)}
    assert sorted(j.split("-")[-1] for j in warmed) == ["1", "1"]
    body = get_mdcc(api_client, namespace, name)
    assert body is not None
    _reconcile_with_view(api_client, body, view)
    after = {j.metadata.name: j.metadata.uid for j in preload_jobs(api_client, namespace)}
    assert after == warmed, "a second preload Job for a node that is already warm"
    assert labeled(api_client, key) == set(targets)
    assert status_of(api_client, namespace, name)["readyNodes"] == 2

    core.patch_node(targets[0], {"metadata": {"labels": {nodelabels.weights_ready_label(key): None}}})
    body = get_mdcc(api_client, namespace, name)
    assert body is not None
    _reconcile_with_view(api_client, body, view)
    again = [j for j in preload_jobs(api_client, namespace) if j.metadata.labels[jobs.ATTEMPT_LABEL] == "2"]
    assert [j.metadata.labels[labels.NODE_LABEL] for j in again] == [targets[0]]
    with operating.operator(kubeconfig, [namespace], render=render()):
        wait_state(api_client, namespace, name, "Ready", readyNodes=2, targetNodes=2)
        delete_all(api_client, namespace)


def test_retryable_failure_keeps_downloading_and_retries_after_backoff(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, _ = own_nodes.add(1)
    network = {"outcome": "Failed", "reason": "NetworkError", "message": "connection reset", "retryable": True}
    hooks = {"sim.warmstart.io/exit-code": "75", "sim.warmstart.io/termination-message": json.dumps(network)}
    with operating.operator(str(cluster.kubeconfig), [namespace], render=render()):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type], podAnnotations=hooks))

        def failed_once() -> dict[str, Any] | None:
            status = status_of(api_client, namespace, name)
            nodes = status.get("nodes") or []
            return status if nodes and nodes[0]["state"] == "Failed" else None

        status = kube.wait_for(failed_once, TIMEOUT, what="the first attempt failed")
        assert status["state"] == "Downloading" and status["nodes"][0]["reason"] == "NetworkError"
        assert "retry 2 of" in status["nodes"][0]["message"]
        kube.wait_for(
            lambda: any(j.metadata.labels[jobs.ATTEMPT_LABEL] == "2" for j in preload_jobs(api_client, namespace)),
            TIMEOUT,
            what="attempt 2",
        )
        delete_all(api_client, namespace)
