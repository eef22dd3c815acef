"""AWS's HyperPod manifests: every field of the real CRDs is in ours, the corpus sets them all, and each renders.

`tests/hyperpod-corpus/aws-fields.txt` lists the field paths of HyperPod's InferenceEndpointConfig and JumpStartModel
CRDs (v1 and v1alpha1). The integration test applies the same corpus on the real API server.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import re
from typing import Any

import pytest
import yaml

from warmstart.api import crds
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.render.unsupported import unsupported_fields

CORPUS = pathlib.Path(__file__).resolve().parents[1] / "hyperpod-corpus"
KINDS = {k.kind: k for k in crds.KINDS}
SPECS: dict[str, Any] = {"InferenceEndpointConfig": InferenceEndpointConfigSpec, "JumpStartModel": JumpStartModelSpec}


def aws_fields() -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for line in (CORPUS / "aws-fields.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            kind, version, path = line.split()
            found[(kind, version)].add(path)
    return found


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}#{i}", doc)
        for path in sorted(CORPUS.glob("*.yaml"))
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


@functools.cache
def schema_of(kind: str, version: str) -> dict[str, Any]:
    (served,) = [v for v in crds.crd(KINDS[kind])["spec"]["versions"] if v["name"] == version]
    spec: dict[str, Any] = served["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def declared(schema: dict[str, Any], path: str | tuple[str, ...]) -> bool:
    """Whether `path` (spec.a.b[].c, or its parts) is a field the schema declares, or lies under a node that keeps
    any field."""
    node = schema
    parts = re.findall(r"[^.\[\]]+|\[\]", path) if isinstance(path, str) else list(path)
    for part in parts[1:]:
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        if part == "[]":
            if "items" not in node:
                return False
            node = node["items"]
        elif part in (node.get("properties") or {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
    return True


def parts(value: Any, path: tuple[str, ...] = ("spec",)) -> set[tuple[str, ...]]:
    """Every field path a manifest sets, as parts ("[]" for a list item): keys may hold dots (nvidia.com/gpu)."""
    found = {path}
    if isinstance(value, dict):
        for key, sub in value.items():
            found |= parts(sub, (*path, key))
    elif isinstance(value, list):
        for sub in value:
            found |= parts(sub, (*path, "[]"))
    return found


def paths(value: Any) -> set[str]:
    """The paths of `parts` written as aws-fields.txt writes them (spec.a.b[].c)."""
    return {".".join(p).replace(".[]", "[]") for p in parts(value)}


#: HyperPod repeats one autoscaling shape (and one trigger shape, singular and in a list) in several places; the corpus
#: covers each shape's fields once per kind and version, and every place the shape appears.
_AUTOSCALING = r"^spec\.(autoScalingSpec|intelligentRoutingSpec\.autoScalingSpec|pdSpec\.autoScalingSpec\.\w+)\."
_SHAPES = (
    (re.compile(_AUTOSCALING), "<autoscaling>."),
    (re.compile(r"<autoscaling>\.cloudWatchTrigger(List\[\])?"), "<autoscaling>.<cloudwatch>"),
    (re.compile(r"<autoscaling>\.prometheusTrigger(List\[\])?"), "<autoscaling>.<prometheus>"),
)  # fmt: skip


def shape(path: str) -> str:
    for pattern, replacement in _SHAPES:
        path = pattern.sub(replacement, path)
    return path


def test_every_hyperpod_field_is_declared_by_our_crds() -> None:
    missing = [
        f"{kind} {version} {path}"
        for (kind, version), wanted in sorted(aws_fields().items())
        for path in sorted(wanted)
        if not declared(schema_of(kind, version), path)
    ]
    assert missing == []


def test_the_corpus_sets_every_hyperpod_field() -> None:
    covered: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for _, doc in documents():
        covered[(doc["kind"], doc["apiVersion"].rsplit("/", 1)[1])] |= paths(doc["spec"])
    assert set(aws_fields()) == set(covered)
    unset = [
        f"{kind} {version} {path}"
        for (kind, version), wanted in sorted(aws_fields().items())
        for path in sorted(wanted)
        if path not in covered[(kind, version)] and shape(path) not in {shape(p) for p in covered[(kind, version)]}
    ]
    assert unset == []


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_corpus_manifest_fits_our_crd_and_models(name: str, doc: dict[str, Any]) -> None:
    version = doc["apiVersion"].rsplit("/", 1)[1]
    schema = schema_of(doc["kind"], version)
    assert sorted(".".join(p) for p in parts(doc["spec"]) if not declared(schema, p)) == [], name
    SPECS[doc["kind"]].model_validate(doc["spec"])


UNSUPPORTED = {
    "iec-resource-claims.yaml#0": [],
    "iec-resource-claims.yaml#1": [],
    "iec-v1-fsx-routing.yaml#0": [
        "spec.loadBalancer.routingAlgorithm (intelligentRoutingSpec decides the routing)",
    ],
    "iec-v1-huggingface-pd.yaml#0": ["spec.dataCapture", "spec.pdSpec"],
    "iec-v1-s3-everything.yaml#0": [
        "spec.tlsConfig",
        "spec.dnsConfig",
        "spec.kvCacheSpec",
        "spec.endpointName",
        "spec.tags",
        "spec.InitialReplicaCount",
        "spec.modelVersion",
        "spec.loadBalancer.healthCheckPath (worker.probes.readinessProbe is used)",
    ],
    "iec-v1-nvme-volume.yaml#0": [
        "spec.endpointName",
        "spec.invocationEndpoint (the router and Service pass every path through)",
    ],
    "iec-v1alpha1-fsx.yaml#0": [],
    "iec-v1alpha1-s3.yaml#0": [
        "spec.tlsConfig",
        "spec.endpointName",
        "spec.tags",
        "spec.InitialReplicaCount",
        "spec.modelVersion",
        "spec.invocationEndpoint (the router and Service pass every path through)",
    ],
    "jsm-v1-everything.yaml#0": [
        "spec.tlsConfig",
        "spec.dnsConfig",
        "spec.dataCapture",
        "spec.kvCacheSpec",
        "spec.sageMakerEndpoint",
        "spec.loadBalancer.routingAlgorithm (intelligentRoutingSpec decides the routing)",
        "spec.intelligentRoutingSpec.autoScalingSpec (spec.autoScalingSpec is used)",
        "spec.model.additionalConfigs",
        "spec.server.executionRole (pods use their service account)",
        "spec.server.validations",
    ],
    "jsm-v1alpha1.yaml#0": [
        "spec.tlsConfig",
        "spec.sageMakerEndpoint",
        "spec.model.additionalConfigs",
        "spec.server.executionRole (pods use their service account)",
    ],
}


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_unsupported_fields_name_only_what_is_not_acted_on(name: str, doc: dict[str, Any]) -> None:
    """prefetchEnabled, modelHubName SageMakerPublicHub, metrics, kubernetes, gatedModelDownloadRole,
    acceleratorPartitionType and autoScalingSpec are acted on, so never named."""
    assert unsupported_fields(SPECS[doc["kind"]].model_validate(doc["spec"])) == UNSUPPORTED[name]
