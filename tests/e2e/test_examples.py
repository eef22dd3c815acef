"""Every example under examples/ is accepted by the real API server (CRD schemas and CEL rules included).

Examples 01-06 are applied for real into a test namespace (metadata.namespace rewritten); no operator runs, so only
admission and validation are exercised. 07-argocd needs Argo CD's CRDs: its ConfigMap is applied with a server-side
dry run, and its Applications are checked in tests/unit/test_argocd_health.py. A broken manifest is refused with the
CRD's message, to show the acceptance is not vacuous.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

import kube

pytestmark = pytest.mark.cluster

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
NUMBERED = sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and p.name[:2].isdigit())


def manifests(directory: pathlib.Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(directory.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(str(cluster.kubeconfig))


def test_examples_are_numbered_and_documented() -> None:
    assert [p.name[:2] for p in NUMBERED] == [f"{i:02d}" for i in range(1, len(NUMBERED) + 1)]
    assert len(NUMBERED) >= 7
    for directory in NUMBERED:
        assert (directory / "README.md").is_file(), directory
        assert manifests(directory), directory


@pytest.mark.parametrize("directory", [p for p in NUMBERED if p.name != "07-argocd"], ids=lambda p: p.name)
def test_example_is_accepted(api_client: client.ApiClient, namespace: str, directory: pathlib.Path) -> None:
    dyn = dynamic.DynamicClient(api_client)
    for manifest in manifests(directory):
        manifest["metadata"]["namespace"] = namespace
        resource = dyn.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        created = resource.server_side_apply(
            body=manifest, name=manifest["metadata"]["name"], namespace=namespace, field_manager="examples-test"
        )
        assert created.metadata.uid, manifest["metadata"]["name"]
        if manifest["kind"] != "Secret":
            stored = resource.get(name=manifest["metadata"]["name"], namespace=namespace).to_dict()
            assert stored["spec"], f"{directory.name}: empty spec after admission"


def test_argocd_configmap_is_accepted(api_client: client.ApiClient, namespace: str) -> None:
    (configmap,) = [m for m in manifests(EXAMPLES / "07-argocd") if m["kind"] == "ConfigMap"]
    configmap["metadata"]["namespace"] = namespace
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, configmap, dry_run="All")


def test_a_broken_example_is_refused_with_the_crds_message(api_client: client.ApiClient, namespace: str) -> None:
    (seed,) = manifests(EXAMPLES / "01-seed")
    seed["metadata"]["namespace"] = namespace
    seed["spec"]["instanceTypes"] = ["ml.g5.48xlarge"]  # besides instanceType: mutually exclusive
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "inference.sagemaker.aws.amazon.com", "v1", namespace, "inferenceendpointconfigs", seed, dry_run="All"
        )
    assert refused.value.status == 422
    assert "mutually exclusive" in str(refused.value.body)
