"""The operator's reading of a model pod's own preload holds against the API server's defaulting (real control plane).

The endpoint's Deployment, rendered for cache access `hostPath`, is applied to the real API server; the
ReplicaSet controller's pod runs on a kwok node. The stored template (with every default the API server fills in)
must still count as running the operator's init container, and the pod as running the template's; a Deployment a
tenant edited (an `envFrom` added to the preload) must not.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

import kube
from endpointing import own_nodes
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import deployments, endpoints, model_pod_fills
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

pytestmark = pytest.mark.cluster

CONTEXT = RenderContext(operator_image="warmstart:test", cache_access="hostPath")


def _endpoint(namespace: str, instance_type: str) -> endpoints.Endpoint:
    spec = {
        "modelName": "fills",
        "modelSourceConfig": {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": "bucket", "region": "us-west-2"},
            "modelLocation": "m",
        },
        "modelCacheConfig": {"weightsCache": {"enabled": True, "hostPath": "/opt/dlami/nvme"}},
        "instanceType": instance_type,
        "worker": {
            "image": "vllm/vllm-openai:v0.11.0",
            "modelInvocationPort": {"containerPort": 8000},
            "modelVolumeMount": {"name": "model-weights", "mountPath": "/opt/ml/model"},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    }
    ref = ObjectRef(kind="InferenceEndpointConfig", name="fills", namespace=namespace, uid="u")
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))


def test_the_stored_template_and_its_pods_read_as_the_operators_preload(
    api_client: client.ApiClient, namespace: str
) -> None:
    with own_nodes(api_client, 1) as (instance_type, _):
        endpoint = _endpoint(namespace, instance_type)
        generation = Generation(endpoint.weights_key({}), endpoint.image_key())
        manifest = deployments.deployment(endpoint, generation, CONTEXT)
        manifest["metadata"].pop("ownerReferences", None)
        apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
        apps.create_namespaced_deployment(namespace, manifest)
        name = manifest["metadata"]["name"]

        def scheduled() -> dict[str, Any] | None:
            pods = core.list_namespaced_pod(namespace).items
            found = [p for p in pods if p.spec.node_name and (p.metadata.name or "").startswith(name)]
            return core.api_client.sanitize_for_serialization(found[0]) if found else None

        pod = kube.wait_for(scheduled, 120, what="the ReplicaSet's pod on the kwok node")
        stored = api_client.sanitize_for_serialization(apps.read_namespaced_deployment(name, namespace))
        template = stored["spec"]["template"]["spec"]
        expected = deployments.preload_init_container(endpoint, generation, CONTEXT)

        assert template != manifest["spec"]["template"]["spec"], "the API server filled in no default"
        assert model_pod_fills.template_runs_our_preload(template, expected)
        assert model_pod_fills.runs_template_preload(pod["spec"], template, deployments.INIT_CONTAINER)

        edited = copy.deepcopy(template)
        preload = next(c for c in edited["initContainers"] if c["name"] == deployments.INIT_CONTAINER)
        preload["envFrom"] = [{"configMapRef": {"name": "tenant-mirror"}}]
        assert not model_pod_fills.template_runs_our_preload(edited, expected)
        apps.delete_namespaced_deployment(name, namespace)
