"""The HyperPod corpus (tests/hyperpod-corpus/) on the real API server with the real operator: every manifest, v1 and
v1alpha1, is accepted by `kubectl apply` (strict field validation), and every child it renders is checked.

JumpStart models resolve through a JumpStart-shaped bucket in moto's S3 server. A minimal PodMonitor CRD is installed
first, so the endpoints with `metrics` get a PodMonitor (the scrape-annotation path is covered by the unit tests).
"""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import yaml
from kubernetes import client

import endpointing as ep
import kube
import operating
from preloadservers import CREDENTIALS, MotoServer
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.render import deployments, monitoring, names, router
from warmstart.render.unsupported import unsupported_fields

pytestmark = pytest.mark.cluster

CORPUS = pathlib.Path(__file__).resolve().parents[1] / "hyperpod-corpus"
REGION = "us-west-2"
MODEL = "meta-textgeneration-llama-3-1-8b-instruct"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/djl-inference:0.31.0-lmi13.0.0-cu124"
ROLE = "arn:aws:iam::123456789012:role/HyperPodGatedModelDownload"
PLURALS = {"InferenceEndpointConfig": "inferenceendpointconfigs", "JumpStartModel": "jumpstartmodels"}
POD_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": monitoring.CRD_NAME},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {
            "kind": "PodMonitor",
            "listKind": "PodMonitorList",
            "plural": "podmonitors",
            "singular": "podmonitor",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def corpus() -> list[dict[str, Any]]:
    return [doc for path in sorted(CORPUS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module", autouse=True)
def crds(cluster: Any) -> Iterator[None]:
    kube.install_crds(str(cluster.kubeconfig))
    kube.apply(str(cluster.kubeconfig), POD_MONITOR_CRD)
    kube.kubectl(str(cluster.kubeconfig), "wait", "--for=condition=Established", f"crd/{monitoring.CRD_NAME}")
    yield
    kube.kubectl(str(cluster.kubeconfig), "delete", "crd", monitoring.CRD_NAME, "--wait=false")


@pytest.fixture(scope="module")
def jumpstart() -> Iterator[dict[str, str]]:
    """JumpStart's content and gated buckets with one gated model whose spec has no resource requirements."""
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
        "hosting_artifact_key": f"{MODEL}/artifacts/inference-prepack/v2.1.0/",
        "hosting_artifact_s3_data_type": "S3Prefix",
        "hosting_instance_type_variants": {
            "regional_aliases": {REGION: {"djl": IMAGE}},
            "variants": {
                "g5": {"regional_properties": {"image_uri": "$djl"}},
                "p4d": {"regional_properties": {"image_uri": "$djl"}},
            },
        },
    }
    s3.put_object(Bucket=content, Key=spec_key, Body=json.dumps(spec).encode())
    manifest = [{"model_id": MODEL, "version": "2.1.0", "spec_key": spec_key}]
    s3.put_object(Bucket=content, Key="models_manifest.json", Body=json.dumps(manifest).encode())
    try:
        yield {"content": content, "gated": gated, "url": server.url}
    finally:
        server.stop()


def _pod_spec(apps: client.AppsV1Api, namespace: str, name: str) -> dict[str, Any]:
    body = kube.wait_for(lambda: _read(apps, namespace, name), timeout=120, what=f"Deployment {name} of the corpus")
    spec: dict[str, Any] = body["spec"]["template"]
    return spec


def _read(apps: client.AppsV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = apps.api_client.sanitize_for_serialization(
            apps.read_namespaced_deployment(name, namespace)
        )
        return found
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _worker(template: dict[str, Any]) -> dict[str, Any]:
    worker: dict[str, Any] = template["spec"]["containers"][0]
    return worker


def _router_strategy(core: client.CoreV1Api, namespace: str, endpoint: str) -> str:
    configmap = kube.wait_for(
        lambda: _configmap(core, namespace, router.name(endpoint)), what=f"router ConfigMap of {endpoint}"
    )
    strategy: str = yaml.safe_load(configmap.data["router.yaml"])["strategy"]
    return strategy


def _configmap(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_config_map(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_every_corpus_manifest_applies_and_renders_its_children(
    cluster: Any,
    api_client: client.ApiClient,
    namespace: str,
    jumpstart: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = str(cluster.kubeconfig)
    for key, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": jumpstart["url"]}.items():
        monkeypatch.setenv(key, value)
    render = {
        "jumpstart_bucket": jumpstart["content"],
        "jumpstart_gated_bucket": jumpstart["gated"],
        "jumpstart_region": REGION,
    }
    docs = corpus()
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    objects = client.CustomObjectsApi(api_client)
    with operating.operator(kubeconfig, [namespace], render=render):  # it finds the PodMonitor CRD at start-up
        for doc in docs:
            result = kube.apply(kubeconfig, doc, namespace, check=False)
            assert result.returncode == 0, f"{doc['metadata']['name']}: {result.stderr}"

        # every object reads back through both versions, with every field it set: conversion None, one schema
        for doc in docs:
            name, plural = doc["metadata"]["name"], PLURALS[doc["kind"]]
            specs = [
                objects.get_namespaced_custom_object(ep.GROUP, version, namespace, plural, name)["spec"]
                for version in ("v1", "v1alpha1")
            ]
            assert specs[0] == specs[1], name
            assert _keeps(specs[0], doc["spec"]), name

        # the kubernetes block, metrics, loadBalancer (router strategy); the object name has dots
        everything = names.child_name("llama-3.1-8b-instruct")
        template = _pod_spec(apps, namespace, everything)
        pod = template["spec"]
        assert (pod["schedulerName"], pod["serviceAccountName"]) == ("hyperpod-scheduler", "inference-sa")
        init = [c["name"] for c in pod["initContainers"]]
        assert init[-1] == "check-weights" and init.index(deployments.INIT_CONTAINER) < len(init) - 1
        assert {"server-config", "scratch"} <= {v["name"] for v in pod["volumes"]}
        assert deployments.SCRAPE_ANNOTATION not in template["metadata"]["annotations"]  # a PodMonitor instead
        monitor = kube.wait_for(
            lambda: kube.get(kubeconfig, "podmonitors.monitoring.coreos.com", everything, namespace), what="PodMonitor"
        )
        assert monitor["spec"]["podMetricsEndpoints"] == [
            {"port": "metrics", "path": "/server/metrics", "interval": "30s"}
        ]
        assert _router_strategy(core, namespace, "llama-3.1-8b-instruct") == "leastoutstanding"
        # worker.requestLimits: the router enforces them
        limits = yaml.safe_load(_configmap(core, namespace, router.name("llama-3.1-8b-instruct")).data["router.yaml"])
        assert (limits["maxConcurrentRequests"], limits["maxQueueSize"], limits["overflowStatusCode"]) == (32, 64, 429)

        # FSx with intelligent routing: its strategy wins over loadBalancer's
        _pod_spec(apps, namespace, "deepseek15b-fsx")
        assert _router_strategy(core, namespace, "deepseek15b-fsx") == "prefixaware"
        # Hugging Face by node affinity: the user's preference is kept
        qwen = _pod_spec(apps, namespace, "qwen-hf")["spec"]["affinity"]["nodeAffinity"]
        assert {
            "weight": 50,
            "preference": {
                "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}]
            },
        } in qwen["preferredDuringSchedulingIgnoredDuringExecution"]
        # v1alpha1: the health check path is the readiness probe; round_robin is the router's strategy
        alpha = _worker(_pod_spec(apps, namespace, "tinyllama-alpha"))
        probe = alpha["readinessProbe"]["httpGet"]
        assert (probe["path"], probe["port"]) == ("/health", "http")
        assert _router_strategy(core, namespace, "tinyllama-alpha") == "roundrobin"
        _pod_spec(apps, namespace, "mistral-fsx-alpha")

        # kubernetesVolume as AWS's NVMe sample writes it: the user's hostPath is the model volume, once, read-only,
        # with no preload (an unlabelled namespace has the cluster's default Pod Security level, privileged here)
        nvme = _pod_spec(apps, namespace, "nvme-k8s-volume")["spec"]
        assert [v["name"] for v in nvme["volumes"]] == ["model-weights"] and "hostPath" in nvme["volumes"][0]
        assert "initContainers" not in nvme
        assert _worker({"spec": nvme})["volumeMounts"] == [
            {"name": "model-weights", "mountPath": "/opt/ml/model", "readOnly": True}
        ]

        # JumpStart: the MIG slice, the GPUs of the instance type, the gated-download role in the preload
        mig = _pod_spec(apps, namespace, "llama-mig")
        assert _worker(mig)["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
        assert {"name": "SM_NUM_GPUS", "value": "1"} in _worker(mig)["env"]
        preload = next(c for c in mig["spec"]["initContainers"] if c["name"] == deployments.INIT_CONTAINER)
        assert ROLE in " ".join(preload["args"])
        assert _worker(_pod_spec(apps, namespace, "llama-alpha"))["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        # the status is patched after the Deployment is applied: wait for it rather than read it once
        status = kube.wait_for(
            lambda: (s := ep.status(api_client, namespace, "llama-alpha", "jumpstartmodels")).get("resolved") and s,
            what="llama-alpha resolved status",
        )
        assert status["resolved"]["modelSourceConfig"]["s3Storage"]["roleArn"] == ROLE

        # resources.claims: each pod claims from the ResourceClaimTemplate of that name (the API server serves DRA)
        for name in ("claims-v1", "claims-v1alpha1"):
            claimed = _pod_spec(apps, namespace, name)
            assert claimed["spec"]["resourceClaims"] == [
                {"name": "gpu-claim", "resourceClaimTemplateName": "gpu-claim"}
            ]
            assert _worker(claimed)["resources"]["claims"] == [{"name": "gpu-claim", "request": "gpu"}]

        # UnsupportedFields names exactly what the spec sets and warmstart does not act on
        for doc in docs:
            name, plural = doc["metadata"]["name"], PLURALS[doc["kind"]]
            model = InferenceEndpointConfigSpec if doc["kind"] == "InferenceEndpointConfig" else JumpStartModelSpec
            expected = unsupported_fields(model.model_validate(doc["spec"]))
            condition = kube.wait_for(
                lambda n=name, p=plural: ep.condition(ep.status(api_client, namespace, n, p), "UnsupportedFields"),
                what=f"UnsupportedFields of {name}",
            )
            assert condition["status"] == ("True" if expected else "False"), name
            for field in expected:
                assert field in condition["message"], (name, field)


def _keeps(stored: Any, sent: Any) -> bool:
    """Whether the stored value holds everything sent (the API server may add defaults, never drop a field)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(k in stored and _keeps(stored[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(stored, list) and len(stored) == len(sent) and all(map(_keeps, stored, sent))
    return bool(stored == sent or str(stored) == str(sent))
