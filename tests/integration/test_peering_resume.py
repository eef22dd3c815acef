"""A paused replica (kopf peering) that resumes acts on the cluster as it is now, not as it was before its pause.

The operator runs with peering, as the chart runs it; the test plays a peer of higher priority by writing a keep-alive
into the KopfPeering object, as a second replica would. The operator pauses; a target node of a Ready cache is
deleted meanwhile; the peer's keep-alive expires (a replica that died) and the operator resumes. kopf sends no event
for an object deleted while a watch is down; the operator must still drop that node from the cache's targets."""

from __future__ import annotations

import datetime as dt
import logging
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import kube
import operating
from chaos_peering import PEERING, install_peering
from fleet import delete_all, render, wait_status
from fleet import mdcc as mdcc_manifest
from nodepool import NodePool
from test_weights_cache import crds  # noqa: F401 - autouse: installs the CRDs
from warmstart.localcluster import nodes as kwok_nodes

pytestmark = pytest.mark.cluster

#: kopf's log lines when it pauses for a peer and resumes after it
PAUSING, RESUMING = "Pausing operations in favour of", "Resuming operations after the pause"
#: the played peer's keep-alive lifetime: the pause lasts this long
PEER_LIFETIME_S = 15


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)


@pytest.fixture
def kopf_lines() -> Iterator[_Lines]:
    lines = _Lines()
    logger = logging.getLogger("kopf")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(lines)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def _play_a_higher_peer(api: client.ApiClient, namespace: str) -> None:
    keepalive = {
        "priority": 10_000,
        "lifetime": PEER_LIFETIME_S,
        "lastseen": dt.datetime.now(dt.UTC).isoformat(),
    }
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "kopf.dev", "v1", namespace, "kopfpeerings", PEERING, {"status": {"played-peer": keepalive}}
    )


def test_a_node_deleted_while_the_operator_was_paused_leaves_the_cache_when_it_resumes(
    cluster: Any, api_client: client.ApiClient, namespace: str, own_nodes: NodePool, kopf_lines: _Lines
) -> None:
    kubeconfig = pathlib.Path(cluster.kubeconfig)
    install_peering(api_client, kubeconfig, namespace)
    instance_type, (kept, deleted) = own_nodes.add(2)
    peering = {"peering": PEERING, "peering_priority": 100}
    with operating.operator(str(kubeconfig), [namespace], render=render(), **peering):
        name = kube.create_custom(api_client, mdcc_manifest(namespace, [instance_type]))
        wait_status(api_client, namespace, name, "both nodes warm", state="Ready", readyNodes=2, targetNodes=2)
        _play_a_higher_peer(api_client, namespace)
        kube.wait_for(lambda: kopf_lines.saw(PAUSING), 30, what="the operator pausing for the peer")
        kopf_lines.lines.clear()  # kopf also says it resumes when it starts
        kwok_nodes.delete_nodes(api_client, [deleted])
        own_nodes.created.remove(deleted)
        kube.wait_for(
            lambda: deleted not in {n.metadata.name for n in client.CoreV1Api(api_client).list_node().items},
            60,
            what=f"node {deleted} gone",
        )
        kube.wait_for(lambda: kopf_lines.saw(RESUMING), PEER_LIFETIME_S + 30, what="the operator resuming")
        status = wait_status(api_client, namespace, name, "the deleted node dropped", readyNodes=1, targetNodes=1)
        assert [n["node"] for n in status["nodes"]] == [kept]
        delete_all(api_client, namespace)
