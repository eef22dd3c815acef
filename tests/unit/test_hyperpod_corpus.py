"""AWS's HyperPod manifests: every field of the real CRDs is in ours, the corpus sets them all, and each renders.

`tests/hyperpod-corpus/aws-fields.txt` lists the field paths of HyperPod's InferenceEndpointConfig and JumpStartModel
CRDs (v1 and v1alpha1). What is accepted is acted on, checked mechanically: rendering the corpus under a trace of
model field reads (tests/fieldtrace.py) must read every AWS field, or `unsupported_fields` must name it; and what it
names is not read. The integration test applies the same corpus on the real API server.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import re
from typing import Any

import pytest
import yaml

import fieldtrace
from warmstart.api import crds
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.states import EndpointState
from warmstart.controllers import resolving
from warmstart.render import autoscaling as render_autoscaling
from warmstart.render import endpoint_children, hyperpod_status, unsupported
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import JumpStartResolution
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


def _named(spec: Any) -> set[str]:
    """The paths `unsupported_fields` names for a spec, without their explanations."""
    return {re.split(r" \(|=", field)[0] for field in unsupported_fields(spec)}


def _render_everything(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """What the endpoint controller renders for `doc` with every optional feature on: resolution, children with the
    gate open, autoscaling and the status blocks. JumpStart's manifest read is replaced by a gated resolution."""
    monkeypatch.setattr(
        resolving,
        "_resolve_jumpstart",
        lambda spec, context: JumpStartResolution(
            bucket="jumpstart", prefix="m/", region="us-west-2", image="img:1", gated=True
        ),
    )
    kind = doc["kind"]
    body = {**doc, "metadata": {"name": "corpus", "namespace": "team-a", "uid": "uid-1", "generation": 1}}
    context = RenderContext(operator_image="warmstart:test", pod_monitors=True, resource_claims=True)
    endpoint = resolving.resolve(kind, body, context, resolving.JumpStartCache.empty())
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    endpoint_children.children(endpoint, True, generation, context, endpoint.proxy_enabled, ["node-a"], True)
    scaling = render_autoscaling.spec_of(endpoint)
    if scaling is not None:
        render_autoscaling.scaled_object(endpoint, scaling, "us-west-2")
        render_autoscaling.problems(scaling)
    hyperpod_status.blocks(endpoint, context, None, EndpointState.DEPLOYMENT_PENDING, [], {}, "now")


def _value_at(doc: dict[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def test_every_hyperpod_field_is_read_by_the_renderers_or_named_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mechanical: render the corpus (which sets every field) while tracing model field reads. Each AWS field path
    must be read on the way (its deepest model field; data under a field held whole counts with it), or be named by
    `unsupported_fields` for some corpus manifest (the path or a field above it). A new field that is neither fails."""
    read: set[fieldtrace.Read] = set()
    named: dict[str, set[str]] = collections.defaultdict(set)
    for _, doc in documents():
        named[doc["kind"]] |= _named(SPECS[doc["kind"]].model_validate(doc["spec"]))
        for path, value in unsupported.ONLY_VALUE.items():  # set to the one value warmstart does: acted on
            if _value_at(doc, path) == value:
                named[doc["kind"]].add(path)
        with fieldtrace.tracing() as found:
            _render_everything(doc, monkeypatch)
        read |= found
    assert (InferenceEndpointConfigSpec, "tls_config") not in read  # the trace does not see everything
    missing, neither = [], []
    for (kind, version), wanted in sorted(aws_fields().items()):
        for path in sorted(wanted):
            chain = fieldtrace.field_chain(SPECS[kind], path)
            if chain is None:
                missing.append(f"{kind} {version} {path}")
            elif (
                chain
                and chain[-1] not in read
                and not any(path == n or path.startswith((f"{n}.", f"{n}[")) for n in named[kind])
            ):
                neither.append(f"{kind} {version} {path}")
    assert missing == [], "AWS fields that are not fields of our models"
    assert neither == [], "AWS fields that warmstart neither reads nor names in UnsupportedFields"


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_unsupported_fields_names_nothing_the_renderers_read(
    name: str, doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other direction, per manifest: a field named as not acted on is not read while rendering that manifest
    (a value named with `=`, such as routingStrategy=kvaware, is served another way and so is read)."""
    spec = SPECS[doc["kind"]].model_validate(doc["spec"])
    with fieldtrace.tracing() as read:
        _render_everything(doc, monkeypatch)
    fields = [f.split(" (")[0] for f in unsupported_fields(spec) if "=" not in f.split(" (")[0]]
    chains = {field: fieldtrace.field_chain(SPECS[doc["kind"]], field) for field in fields}
    assert [field for field, chain in chains.items() if chain and chain[-1] in read] == [], name
