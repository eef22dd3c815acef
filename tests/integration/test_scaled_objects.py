"""autoScalingSpec on the real control plane: a ScaledObject validated by KEDA's real CRDs, or a clear condition.

Real here: the API server, with KEDA v2.21.0's own CRDs (from the pinned KEDA Go module) doing the validation, and
the operator in-process. KEDA's operator does not run here (tests/e2e/test_keda_operator.py runs it): this checks what
warmstart writes and says. The tests run in file order: first without KEDA's CRDs, then with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from warmstart.localcluster import keda

pytestmark = pytest.mark.cluster

AUTOSCALING = {
    "minReplicaCount": 1,
    "maxReplicaCount": 4,
    "pollingInterval": 10,
    "prometheusTrigger": {
        "name": "router-queue-depth",
        "serverAddress": "http://prometheus.monitoring.svc:9090",
        "query": "sum(warmstart_router_queue_depth)",
        "targetValue": 4,
        "metricType": "Value",
    },
    "cloudWatchTriggerList": [
        {
            "name": "invocations",
            "namespace": "AWS/SageMaker",
            "metricName": "Invocations",
            "dimensions": [{"name": "EndpointName", "value": "scaled"}],
            "targetValue": 100,
        }
    ],
}


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


@pytest.fixture(scope="module")
def keda_crds(cluster: Any) -> Iterator[None]:
    paths = [str(p) for p in keda.crd_paths()]
    args = [a for p in paths for a in ("-f", p)]
    kube.kubectl(str(cluster.kubeconfig), "apply", "--server-side", "--force-conflicts", *args)
    kube.kubectl(str(cluster.kubeconfig), "wait", "--for=condition=Established", "--timeout=60s", *args)
    yield
    kube.delete_crds(str(cluster.kubeconfig), paths)


def _scaled_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "keda.sh", "v1alpha1", namespace, "scaledobjects", name
        )
        return found
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _manifest(namespace: str, **spec: Any) -> dict[str, Any]:
    return ep.endpoint_manifest(
        "scaled", namespace, "ml.g5.8xlarge", modelCacheConfig={"weightsCache": {"enabled": False}}, **spec
    )


def test_without_keda_the_endpoint_deploys_and_says_keda_is_missing(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    found = kube.kubectl(str(cluster.kubeconfig), "get", "crd", "scaledobjects.keda.sh", check=False)
    assert found.returncode != 0, "this test needs a cluster without KEDA's CRDs"
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        kube.apply(str(cluster.kubeconfig), _manifest(namespace, autoScalingSpec=AUTOSCALING))
        scaling = kube.wait_for(
            lambda: ep.condition(ep.status(api_client, namespace, "scaled"), "Autoscaling"), what="Autoscaling"
        )
        assert scaling["status"] == "False" and scaling["reason"] == "KedaNotInstalled"
        assert "scaledobjects.keda.sh" in scaling["message"]
        # the rest of the endpoint is unaffected: the Deployment exists at spec.replicas
        deployment = kube.wait_for(
            lambda: client.AppsV1Api(api_client).list_namespaced_deployment(namespace).items, what="the Deployment"
        )
        assert deployment[0].spec.replicas == 1


@pytest.mark.usefixtures("keda_crds")
def test_keda_crds_accept_the_scaled_object_and_it_goes_when_autoscaling_is_removed(
    cluster: Any, api_client: client.ApiClient, namespace: str
) -> None:
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        kube.apply(str(cluster.kubeconfig), _manifest(namespace, autoScalingSpec=AUTOSCALING))
        scaled = kube.wait_for(lambda: _scaled_object(api_client, namespace, "scaled"), what="the ScaledObject")
        spec = scaled["spec"]
        assert spec["scaleTargetRef"] == {
            "apiVersion": f"{ep.GROUP}/{ep.VERSION}",
            "kind": "InferenceEndpointConfig",
            "name": "scaled",
        }
        assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["pollingInterval"]) == (1, 4, 10)
        assert [t["type"] for t in spec["triggers"]] == ["prometheus", "aws-cloudwatch"]
        assert spec["triggers"][1]["metadata"]["dimensionName"] == "EndpointName"
        scaling = kube.wait_for(
            lambda: (
                (c := ep.condition(ep.status(api_client, namespace, "scaled"), "Autoscaling"))
                and c["status"] == "True"
                and c
            )
        )
        assert scaling["reason"] == "ScaledObjectApplied"

        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "inferenceendpointconfigs", "scaled", {"spec": {"autoScalingSpec": None}}
        )
        kube.wait_for(lambda: _scaled_object(api_client, namespace, "scaled") is None, what="the ScaledObject gone")
        gone = kube.wait_for(
            lambda: (
                (c := ep.condition(ep.status(api_client, namespace, "scaled"), "Autoscaling"))
                and c["reason"] == "NotRequested"
                and c
            )
        )
        assert gone["status"] == "False"


@pytest.mark.usefixtures("keda_crds")
def test_keda_crds_really_validate(api_client: client.ApiClient, namespace: str) -> None:
    """The acceptance above is not vacuous: KEDA's CRD refuses a ScaledObject without a trigger type."""
    broken = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "broken", "namespace": namespace},
        "spec": {"scaleTargetRef": {"name": "x"}, "triggers": [{"metadata": {"query": "q"}}]},
    }
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "keda.sh", "v1alpha1", namespace, "scaledobjects", broken
        )
    assert refused.value.status == 422 and "type" in str(refused.value.body)
