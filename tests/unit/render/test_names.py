"""Every child of every endpoint name Kubernetes accepts is itself acceptable: generated worst cases, 1..253 chars.

A CR name is a DNS-1123 subdomain (digits first and dots allowed, up to 253). Each rendered child is checked against
the rule Kubernetes applies to its kind: Service names are DNS-1035 labels, other names DNS-1123 subdomains, every
label and selector value a label value; and different endpoint names never share a child name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.render import caches, deployments, endpoints, jobs, names, router, services
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = RenderContext(operator_image="warmstart:test")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def generated_names() -> Iterator[str]:
    """For each length 1..253: plain letters, digit first, dotted, dashed-and-dotted, all digits."""
    for length in range(1, 254):
        yield "a" * length
        yield ("1" + "b" * (length - 1))[:length]
        yield "9" * length
        if length >= 3:
            yield ("a." * length)[: length - 1] + "z"
            yield ("0-x.y" * length)[: length - 1] + "7"


ENDPOINT_NAMES = sorted(set(generated_names()))


def _valid_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(DNS1123_SUBDOMAIN.match(name))


def test_the_generated_names_are_names_kubernetes_accepts_for_a_custom_resource() -> None:
    assert all(_valid_subdomain(n) for n in ENDPOINT_NAMES)
    assert {len(n) for n in ENDPOINT_NAMES} == set(range(1, 254))


def _spec() -> InferenceEndpointConfigSpec:
    doc = yaml.safe_load((ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text())
    doc["spec"]["intelligentRoutingSpec"] = {"enabled": True}
    return InferenceEndpointConfigSpec.model_validate(doc["spec"])


SPEC = _spec()


def children(name: str) -> list[dict[str, Any]]:
    endpoint = endpoints.from_iec(ObjectRef(kind="InferenceEndpointConfig", name=name, namespace="ns", uid="u"), SPEC)
    generation = Generation(endpoint.weights_key({}), endpoint.image_key())
    mdcc = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": endpoint.source.to_api()})
    owner = jobs.Owner(name=name, namespace="ns", uid="u")  # a user-made cache may have any name too
    request = jobs.PreloadRequest(owner=owner, key="0123456789ab", node="node-0", attempt=1, generation=1)
    return [
        caches.weights_cache(endpoint, CONTEXT),
        caches.image_cache(endpoint),
        deployments.deployment(endpoint, generation, CONTEXT),
        services.client_service(endpoint, via_router=True),
        *router.manifests(endpoint, CONTEXT, ["node-0"]),
        jobs.preload_job(request, mdcc, CONTEXT, [64]),
        jobs.cleanup_job(owner, "0123456789ab", "node-0", mdcc, CONTEXT),
    ]


def _label_maps(manifest: dict[str, Any]) -> Iterator[dict[str, str]]:
    yield manifest["metadata"].get("labels") or {}
    spec = manifest.get("spec") or {}
    if isinstance(spec.get("selector"), dict):
        yield spec["selector"].get("matchLabels") or spec["selector"]
    template = spec.get("template") or {}
    yield (template.get("metadata") or {}).get("labels") or {}


@pytest.mark.parametrize("name", ENDPOINT_NAMES, ids=lambda n: f"{len(n)}:{n[:12]}")
def test_every_child_name_and_label_is_valid_for_its_kind(name: str) -> None:
    for manifest in children(name):
        child = manifest["metadata"]["name"]
        kind = manifest["kind"]
        if kind == "Service":
            assert len(child) <= 63 and DNS1035.match(child), f"Service {child!r} of {name!r}"
        else:
            assert _valid_subdomain(child), f"{kind} {child!r} of {name!r}"
        if kind in ("Deployment", "Job", "DaemonSet"):
            assert len(child) <= 63, f"{kind} {child!r}: its pods' hostnames come from it"
        for labels in _label_maps(manifest):
            for key, value in labels.items():
                assert len(value) <= 63 and LABEL_VALUE.match(value), f"{kind} label {key}={value!r} of {name!r}"


def test_a_name_that_fits_is_kept_and_different_names_never_share_a_child() -> None:
    assert names.child_name("example-model") == "example-model"
    assert router.name("example-model") == "example-model-router"
    assert names.label_value("team.a.model") == "team.a.model"
    for suffix in ("", "-router", "-models"):
        produced = {names.child_name(n, suffix) for n in ENDPOINT_NAMES}
        assert len(produced) == len(ENDPOINT_NAMES), suffix
    assert len({names.label_value(n) for n in ENDPOINT_NAMES}) == len(ENDPOINT_NAMES)


@pytest.mark.parametrize("length", range(57, 64))
def test_models_service_of_a_57_to_63_character_name_is_a_valid_service_name(length: int) -> None:
    name = "m" * length
    service = router.models_service(
        endpoints.from_iec(ObjectRef(kind="InferenceEndpointConfig", name=name, namespace="n", uid="u"), SPEC)
    )
    assert len(service["metadata"]["name"]) <= 63
    assert DNS1035.match(service["metadata"]["name"])
