"""Worst-case endpoint names and rejected renderings, with the real operator against the real control plane.

- An endpoint whose name is 253 characters, starts with a digit and has dots (all valid for a CR) gets every child
  created by the API server (Deployment, Service, the router's objects) and reaches DeploymentComplete; so does a
  63-character name, whose `<name>-router` Service used to be refused (now its `<name>-models` Service).
- A spec the CRD accepts but whose rendering the API server refuses (a malformed toleration) ends as
  DeploymentFailed with reason RenderRejected and the API server's message, and stays there.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.controllers.reconciling import RENDER_REJECTED
from warmstart.render import names, router

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


WORST = ("1" + ".a1" * 84)[:253]
LONG = "m" * 63


def _manifest(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = ep.endpoint_manifest(name, namespace, "ml.g5.24xlarge", **spec)
    body["spec"]["modelName"] = "worst-case"
    body["spec"]["modelSourceConfig"]["modelLocation"] = "models/worst-case"
    body["spec"]["modelCacheConfig"] = {"weightsCache": {"enabled": False}}
    body["spec"]["worker"]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return body


def test_worst_case_names_get_every_child_and_complete(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    assert len(WORST) == 253 and WORST[0].isdigit() and "." in WORST
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        for name in (WORST, LONG):
            kube.create_custom(api_client, _manifest(namespace, name, intelligentRoutingSpec={"enabled": True}))
        for name in (WORST, LONG):
            status = kube.wait_for(
                lambda n=name: (s := ep.status(api_client, namespace, n)).get("state") == "DeploymentComplete" and s,
                timeout=180,
                what=f"DeploymentComplete of a {len(name)}-character name",
            )
            child = names.child_name(name)
            assert status["deploymentName"] == child and status["routerName"] == router.name(name)
            core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
            assert core.read_namespaced_service(child, namespace)
            assert core.read_namespaced_service(router.models_service_name(name), namespace)
            assert apps.read_namespaced_deployment(router.name(name), namespace)
            assert status["availableReplicas"] == 1
        for name in (WORST, LONG):
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", name
            )
        kube.wait_for(
            lambda: not ep.caches(api_client, namespace, "inferenceendpointconfigs"), 120, what="endpoints deleted"
        )


def test_a_rendering_the_api_server_refuses_is_reported_not_retried_silently(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    bad = _manifest(namespace, "bad-toleration", kubernetes={"tolerations": [{"key": "x", "operator": "Sometimes"}]})
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        kube.create_custom(api_client, bad)
        status = kube.wait_for(
            lambda: (s := ep.status(api_client, namespace, "bad-toleration")).get("state") == "DeploymentFailed" and s,
            timeout=120,
            what="DeploymentFailed",
        )
        ready = ep.condition(status, "Ready")
        assert ready["reason"] == RENDER_REJECTED, ready
        assert "operator" in ready["message"] and "Sometimes" in ready["message"], ready
        time.sleep(5)  # a few resync periods (2 s here): the failure stays reported
        again = ep.status(api_client, namespace, "bad-toleration")
        assert again["state"] == "DeploymentFailed" and ep.condition(again, "Ready")["reason"] == RENDER_REJECTED
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "bad-toleration"
        )
        kube.wait_for(
            lambda: not ep.caches(api_client, namespace, "inferenceendpointconfigs"), 120, what="endpoint deleted"
        )
