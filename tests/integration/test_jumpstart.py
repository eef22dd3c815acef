"""JumpStartModel on the real control plane, resolved through a JumpStart manifest in a local S3 server (moto)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from kubernetes import client

import endpointing as ep
import kube
import operating
from preloadservers import CREDENTIALS, MotoServer

pytestmark = pytest.mark.cluster

REGION = "us-west-2"
MODEL = "meta-textgeneration-llama-3-1-8b-instruct"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.31.0-lmi13.0.0-cu124"


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> None:
    kube.install_crds(cluster.kubeconfig)


@pytest.fixture(scope="module")
def jumpstart_buckets() -> Iterator[dict[str, str]]:
    """A content and a gated bucket laid out as JumpStart's: models_manifest.json, a spec, a EULA, artifacts."""
    server = MotoServer(CREDENTIALS).start()
    s3 = boto3.client(
        "s3", endpoint_url=server.url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    content, gated = f"jsc-{uuid.uuid4().hex[:8]}", f"jsg-{uuid.uuid4().hex[:8]}"
    for bucket in (content, gated):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    spec_key = f"community_models/{MODEL}/specs_v2.1.0.json"
    spec = {
        "model_id": MODEL,
        "version": "2.1.0",
        "gated_bucket": True,
        "hosting_eula_key": f"fmhMetadata/eula/{MODEL}Eula.txt",
        "hosting_artifact_key": f"{MODEL}/artifacts/inference/v2.1.0/",
        "hosting_prepacked_artifact_key": f"{MODEL}/artifacts/inference-prepack/v2.1.0/",
        "hosting_artifact_s3_data_type": "S3Prefix",
        "inference_environment_variables": [
            {
                "name": "OPTION_TENSOR_PARALLEL_DEGREE",
                "type": "text",
                "default": "1",
                "scope": "container",
                "required_for_model_class": True,
            }
        ],
        "hosting_instance_type_variants": {
            "regional_aliases": {REGION: {"alias_ecr_uri_1": IMAGE}},
            "variants": {
                "g5": {"regional_properties": {"image_uri": "$alias_ecr_uri_1"}},
                "ml.g5.12xlarge": {"properties": {"environment_variables": {"OPTION_TENSOR_PARALLEL_DEGREE": "4"}}},
            },
        },
    }
    s3.put_object(Bucket=content, Key=spec_key, Body=json.dumps(spec).encode())
    s3.put_object(
        Bucket=content,
        Key="models_manifest.json",
        Body=json.dumps(
            [{"model_id": MODEL, "version": "2.1.0", "min_version": "2.49.0", "spec_key": spec_key}]
        ).encode(),
    )
    s3.put_object(Bucket=content, Key=spec["hosting_eula_key"], Body=b"LLAMA 3.1 COMMUNITY LICENSE")
    s3.put_object(Bucket=gated, Key=f"{MODEL}/artifacts/inference-prepack/v2.1.0/model.safetensors", Body=b"w" * 1000)
    try:
        yield {"content": content, "gated": gated, "url": server.url}
    finally:
        server.stop()


def test_gated_model_waits_for_accept_eula_then_deploys(
    cluster: Any,
    api_client: client.ApiClient,
    namespace: str,
    jumpstart_buckets: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": jumpstart_buckets["url"]}.items():
        monkeypatch.setenv(key, value)
    render = {
        "jumpstart_bucket": jumpstart_buckets["content"],
        "jumpstart_gated_bucket": jumpstart_buckets["gated"],
        "jumpstart_region": REGION,
    }
    body = {
        "apiVersion": f"{ep.GROUP}/{ep.VERSION}",
        "kind": "JumpStartModel",
        "metadata": {"name": "llama", "namespace": namespace},
        "spec": {
            "model": {"modelId": MODEL, "modelVersion": "2.*"},
            "server": {"instanceType": "ml.g5.12xlarge"},
            "modelCacheConfig": {"weightsCache": {"enabled": True}},
        },
    }
    objects = client.CustomObjectsApi(api_client)
    with (
        ep.own_nodes(api_client, 2, gpus=4, instance_type="ml.g5.12xlarge"),
        operating.operator(str(cluster.kubeconfig), [namespace], render=render),
    ):
        objects.create_namespaced_custom_object(ep.GROUP, ep.VERSION, namespace, "jumpstartmodels", body)
        failed = kube.wait_for(
            lambda: (
                (s := ep.status(api_client, namespace, "llama", "jumpstartmodels")).get("state") == "DeploymentFailed"
                and s
            ),
            what="EULA refusal",
        )
        ready = ep.condition(failed, "Ready")
        assert ready["reason"] == "EulaNotAccepted"
        assert "acceptEula: true" in ready["message"] and "Eula.txt" in ready["message"]
        assert kube.get(str(cluster.kubeconfig), "deployment", "llama", namespace) is None
        assert ep.caches(api_client, namespace, "modeldatacacheconfigs") == []

        objects.patch_namespaced_custom_object(
            ep.GROUP, ep.VERSION, namespace, "jumpstartmodels", "llama", {"spec": {"model": {"acceptEula": True}}}
        )
        done = kube.wait_for(
            lambda: (
                (s := ep.status(api_client, namespace, "llama", "jumpstartmodels")).get("state") == "DeploymentComplete"
                and s
            ),
            timeout=180,
            what="DeploymentComplete",
        )
        assert done["resolved"]["image"] == IMAGE
        assert done["resolved"]["environment"] == {"OPTION_TENSOR_PARALLEL_DEGREE": "4"}
        source = done["resolved"]["modelSourceConfig"]
        assert source["s3Storage"]["bucketName"] == jumpstart_buckets["gated"]
        assert source["modelLocation"] == f"{MODEL}/artifacts/inference-prepack/v2.1.0/"
        mdcc = ep.caches(api_client, namespace, "modeldatacacheconfigs")
        assert len(mdcc) == 1 and mdcc[0]["status"]["state"] == "Ready" and mdcc[0]["status"]["readyNodes"] == 2
        deployment = client.AppsV1Api(api_client).read_namespaced_deployment("llama", namespace)
        worker = deployment.spec.template.spec.containers[0]
        assert worker.image == IMAGE and {e.name: e.value for e in worker.env} == {"OPTION_TENSOR_PARALLEL_DEGREE": "4"}
