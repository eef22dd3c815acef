"""`worker.resources.claims` on the real control plane: the model pods get the pod half of dynamic resource
allocation (a `resourceClaims` entry made from the ResourceClaimTemplate of each name), the API server accepts the
Deployment, and the resource claim controller makes each pod its own ResourceClaim from the template. Where the API
server does not serve the DRA API the operator finds out at start-up and the endpoint says so in a condition.

No DRA driver runs here, so the claims are never allocated and the pods stay Pending: the test checks what reaches
the API server, which is what warmstart renders; allocation is the driver's job.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.render import resource_claims

pytestmark = pytest.mark.cluster

DEVICE_CLASS = "warmstart-test-gpu"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> Iterator[None]:
    """The CRDs, and a DeviceClass for the templates to name (removed at the end: it is cluster-scoped)."""
    config = str(cluster.kubeconfig)
    kube.install_crds(config)
    device_class = {
        "apiVersion": resource_claims.RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
    }
    kube.apply(config, device_class)
    yield
    kube.kubectl(config, "delete", "deviceclass", DEVICE_CLASS, "--ignore-not-found")


def _claims_endpoint(namespace: str, instance_type: str) -> dict[str, Any]:
    body = ep.endpoint_manifest("claims", namespace, instance_type, modelCacheConfig={"imageCache": {"enabled": False}})
    body["spec"]["worker"]["resources"] = {"claims": [{"name": "gpu", "request": "one"}]}
    return body


def _template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": resource_claims.RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "one", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}},
    }


def test_claims_reach_each_model_pod_as_its_own_resource_claim(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    config = str(cluster.kubeconfig)
    kube.apply(config, _template(namespace))
    core = client.CoreV1Api(api_client)
    with ep.own_nodes(api_client, 1) as (instance_type, _), operating.operator(config, [namespace]):
        kube.apply(config, _claims_endpoint(namespace, instance_type))
        pod = kube.wait_for(
            lambda: next(
                iter(
                    core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=model-server").items
                ),
                None,
            ),
            what="a model pod",
        )
        assert [(c.name, c.resource_claim_template_name) for c in pod.spec.resource_claims] == [("gpu", "gpu")]
        worker = next(c for c in pod.spec.containers if c.name == "worker")
        assert [(c.name, c.request) for c in worker.resources.claims] == [("gpu", "one")]
        # the resource claim controller made this pod its own claim from the template, and recorded it on the pod
        made = kube.wait_for(
            lambda: (s := core.read_namespaced_pod(pod.metadata.name, namespace).status.resource_claim_statuses) and s,
            what="the pod's generated ResourceClaim",
        )
        assert [s.name for s in made] == ["gpu"]
        claim = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaims", made[0].resource_claim_name
        )
        assert [o["name"] for o in claim["metadata"]["ownerReferences"]] == [pod.metadata.name]
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == DEVICE_CLASS
        assert ep.status(api_client, namespace, "claims").get("state") != "DeploymentFailed"


def test_claims_on_an_api_server_without_dra_are_refused_with_a_condition(
    cluster: Any, api_client: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up check asks the real API server for a group version it does not serve (as one without DRA)."""
    monkeypatch.setattr(resource_claims, "RESOURCE_API", "resource.k8s.io/v0absent")
    config = str(cluster.kubeconfig)
    with ep.own_nodes(api_client, 1) as (instance_type, _), operating.operator(config, [namespace]):
        kube.apply(config, _claims_endpoint(namespace, instance_type))
        failed = kube.wait_for(
            lambda: (s := ep.status(api_client, namespace, "claims")).get("state") == "DeploymentFailed" and s,
            what="the endpoint refused",
        )
        ready = ep.condition(failed, "Ready")
        assert ready["reason"] == resource_claims.UNAVAILABLE_REASON
        assert "resource.k8s.io/v0absent" in ready["message"] and "gpu" in ready["message"]
        assert client.AppsV1Api(api_client).list_namespaced_deployment(namespace).items == []
