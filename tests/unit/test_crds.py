"""The committed CRDs are exactly what the API model generates, and they carry the promised structure."""

from __future__ import annotations

from pathlib import Path

import yaml

from warmstart.api import crds
from warmstart.api.routers import RouterConfig
from warmstart.render import api_reference

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_model() -> None:
    for name, text in crds.rendered().items():
        committed = (ROOT / "crds" / name).read_text()
        assert committed == text, f"crds/{name} is stale: run `make crds`"


def test_no_stray_crd_files() -> None:
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(crds.rendered())


def _crd(plural: str) -> dict:
    return next(crds.crd(k) for k in crds.KINDS if k.plural == plural)


def test_scale_subresource_on_endpoints_only() -> None:
    for plural in ("inferenceendpointconfigs", "jumpstartmodels"):
        sub = _crd(plural)["spec"]["versions"][0]["subresources"]
        assert sub["scale"] == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    for plural in ("modeldatacacheconfigs", "modelimagecaches"):
        assert _crd(plural)["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_short_names_and_columns() -> None:
    names = {k.plural: _crd(k.plural)["spec"]["names"]["shortNames"] for k in crds.KINDS}
    assert names["modeldatacacheconfigs"] == ["mdcc"] and names["modelimagecaches"] == ["mic"]
    columns = [c["name"] for c in _crd("modeldatacacheconfigs")["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:3] == ["State", "Ready", "Target"] and "Age" in columns


def test_schemas_are_structural() -> None:
    """Every node has a type (or is int-or-string / preserve-unknown); no $ref, anyOf or null left."""

    def walk(node: dict, path: str) -> None:
        assert "$ref" not in node and "anyOf" not in node, path
        assert (
            "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        ), path
        assert node.get("type") != "null", path
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    for kind in crds.KINDS:
        walk(crds.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"], kind.kind)


def test_files_parse_as_single_documents() -> None:
    for path in (ROOT / "crds").glob("*.yaml"):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"


def test_every_routing_strategy_the_crds_admit_is_one_the_router_runs() -> None:
    for plural in ("inferenceendpointconfigs", "jumpstartmodels"):
        spec = _crd(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        admitted = spec["properties"]["intelligentRoutingSpec"]["properties"]["routingStrategy"]["enum"]
        assert {"roundrobin", "least_outstanding_requests", "prefix_aware", "kvaware"} <= set(admitted)
        for spelling in admitted:
            RouterConfig(strategy=spelling)  # raises if the router cannot read it


def test_committed_api_reference_matches_the_model() -> None:
    assert (ROOT / "docs" / "api-reference.md").read_text() == api_reference.page(), (
        "docs/api-reference.md is stale: run `make crds`"
    )


def test_api_reference_names_every_field_not_acted_on() -> None:
    text = api_reference.page()
    assert "| `spec.tlsConfig` | object |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `spec.tlsConfig` |"))
    assert "| no |" in row
    row = next(line for line in text.splitlines() if line.startswith("| `spec.replicas` |"))
    assert "| `1` |" in row and "| yes |" in row and "minimum `0`" in row


def test_exclusive_bounds_are_openapi_v3_booleans() -> None:
    """`gt=0` gives JSON Schema 2020's `exclusiveMinimum: 0`; the API server refuses a CRD with a number there."""

    def bounds(node: object) -> list[object]:
        if isinstance(node, dict):
            found = [node[key] for key in ("exclusiveMinimum", "exclusiveMaximum") if key in node]
            return found + [value for child in node.values() for value in bounds(child)]
        if isinstance(node, list):
            return [value for child in node for value in bounds(child)]
        return []

    found = [value for kind in crds.KINDS for value in bounds(crds.crd(kind))]
    assert found and all(value is True for value in found)
