"""The operator's node informer (controllers/node_watching.py) on the real control plane: what a user relies on when
nodes change, and a watch that expires ("410 Gone") without losing what changed meanwhile.

Real kube-apiserver, etcd and kwok nodes; nothing is faked. The expiry is the API server's own: the test keeps a
resourceVersion, lets the watch cache's window move past it (its events older than the cache's freshness span are
dropped once the cache is full), and watches from it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes import client

import fleet
import kube
import operating
from nodepool import NodePool
from warmstart.api import nodelabels
from warmstart.controllers import node_watching, nodes
from warmstart.controllers.storage import load_api_client
from warmstart.localcluster import nodes as kwok_nodes

pytestmark = pytest.mark.cluster

#: the API server's watch cache keeps every event younger than this (its eventFreshDuration, 75 s) whatever its size
WATCH_CACHE_FRESH_SECONDS = 75.0
#: node patches at most, to push a resourceVersion out of the watch cache's window
CHURN_LIMIT = 20_000


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def test_a_node_that_loses_its_ready_label_is_warmed_again_and_a_deleted_one_leaves_the_cache(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    core = client.CoreV1Api(api_client)
    instance_type, targets = own_nodes.add(3)
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render()):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        fleet.wait_status(api_client, namespace, name, "ready", state="Ready", targetNodes=3, readyNodes=3)
        label = nodelabels.weights_ready_label(name.removeprefix("weights-"))

        core.patch_node(targets[0], {"metadata": {"labels": {label: None}}})  # someone took the label away
        kube.wait_for(lambda: fleet.labeled(api_client, name) == set(targets), fleet.TIMEOUT, what="labelled again")
        fleet.wait_status(api_client, namespace, name, "ready", state="Ready", targetNodes=3, readyNodes=3)

        kwok_nodes.delete_node(api_client, targets[2])
        status = fleet.wait_status(api_client, namespace, name, "two left", state="Ready", targetNodes=2, readyNodes=2)
        assert {n["node"] for n in status["nodes"]} == set(targets[:2])
        fleet.delete_all(api_client, namespace)


def test_a_node_that_turns_ready_becomes_a_target(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool
) -> None:
    instance_type, targets = own_nodes.add(2)
    fleet.set_ready(api_client, targets[1], "False")
    with operating.operator(str(cluster.kubeconfig), [namespace], render=fleet.render()):
        name = kube.create_custom(api_client, fleet.mdcc(namespace, [instance_type]))
        status = fleet.wait_status(api_client, namespace, name, "ready on one", state="Ready", targetNodes=1)
        assert targets[1] in fleet.unavailable(status) and status["readyNodes"] == 1

        fleet.give_back(api_client, targets[1])
        fleet.wait_status(api_client, namespace, name, "ready on both", state="Ready", targetNodes=2, readyNodes=2)
        assert fleet.labeled(api_client, name) == set(targets)
        fleet.delete_all(api_client, namespace)


def _expired(api: client.ApiClient, since: str) -> bool:
    """Whether a watch of nodes from `since` is refused as too old (the API server's 410)."""
    try:
        response = api.call_api(
            "/api/v1/nodes",
            "GET",
            query_params=[("watch", "true"), ("resourceVersion", since), ("timeoutSeconds", 1)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
    except client.ApiException as error:
        return error.status == 410
    first = response.readline()
    response.release_conn()
    event = json.loads(first) if first else {}
    return event.get("type") == "ERROR" and event.get("object", {}).get("code") == 410


def _churn_until_expired(api: client.ApiClient, node: str, since: str) -> None:
    """Patch `node` until the watch cache no longer reaches back to `since` (after its freshness span)."""
    time.sleep(WATCH_CACHE_FRESH_SECONDS + 5)
    core = client.CoreV1Api(api)
    for round_ in range(CHURN_LIMIT // 100):
        for i in range(100):
            core.patch_node(node, {"metadata": {"annotations": {"test.warmstart.io/churn": f"{round_}-{i}"}}})
        if _expired(api, since):
            return
    raise AssertionError(f"resourceVersion {since} still served after {CHURN_LIMIT} node events")


def test_an_expired_watch_lists_again_and_keeps_what_changed_while_it_was_down(
    cluster: Any, api_client: client.ApiClient, own_nodes: NodePool
) -> None:
    core = client.CoreV1Api(api_client)
    instance_type, (relabelled, deleted, churned) = own_nodes.add(3)
    informer = node_watching.NodeInformer(load_api_client(str(cluster.kubeconfig)))
    since = informer.list_all()
    by_type = informer.indexes()[nodes.NODES_BY_INSTANCE_TYPE]
    assert set(by_type[instance_type]) == {relabelled, deleted, churned}

    # while the informer does not watch: a label goes, a node goes, a node comes
    label = f"{nodelabels.CACHE_PREFIX}/weights-{uuid.uuid4().hex[:8]}"
    core.patch_node(relabelled, {"metadata": {"labels": {label: nodelabels.READY}}})
    kwok_nodes.delete_node(api_client, deleted)
    _, (joined,) = own_nodes.add(1, start=3, instance_type=instance_type)
    _churn_until_expired(api_client, churned, since)

    with pytest.raises(node_watching.Expired):
        informer.watch(since)
    informer.list_all()  # what run() does on Expired
    assert set(by_type[instance_type]) == {relabelled, churned, joined}
    facts = informer.indexes()[nodes.NODE_FACTS]
    assert facts[relabelled][0].labels.get(label) == nodelabels.READY
    assert nodes.ready_labelled(informer.indexes()[nodes.NODES_BY_READY_LABEL], label) == [relabelled]
    assert deleted not in facts and facts[joined][0].ready == "True"
