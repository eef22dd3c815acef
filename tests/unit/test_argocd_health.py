"""Argo CD health checks (examples/07-argocd/health/*.lua) run in a real Lua interpreter against sample statuses.

The statuses are built from the API models (warmstart.api), so a renamed status field breaks these tests rather than
the health checks in production. The shipped argocd-cm.yaml is generated from the same Lua files (UPDATE_GOLDEN=1)
and checked for equality, so the tested Lua is the shipped Lua.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest
import yaml
from lupa import LuaRuntime

from warmstart.api import API_VERSION, GROUP
from warmstart.api.base import Condition, ConditionStatus
from warmstart.api.caches import ModelDataCacheConfigStatus, ModelImageCacheStatus
from warmstart.api.states import CacheState, EndpointState
from warmstart.api.statuses import CacheSummary, EndpointStatus

ARGOCD = pathlib.Path(__file__).resolve().parents[2] / "examples" / "07-argocd"
HEALTH = ARGOCD / "health"
#: one script per shape of status: both endpoint kinds share one, both cache kinds the other
KINDS = {
    "InferenceEndpointConfig": "endpoint.lua",
    "JumpStartModel": "endpoint.lua",
    "ModelDataCacheConfig": "cache.lua",
    "ModelImageCache": "cache.lua",
}


def health(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    """Run the kind's health script as Argo CD does: `obj` is a global table, the script returns `hs`."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((HEALTH / KINDS[kind]).read_text())
    return {str(k): str(v) for k, v in result.items()}


def endpoint(kind: str, status: EndpointStatus | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": "m", "generation": generation},
        "spec": {},
    }
    if status is not None:
        body["status"] = status.to_api()
    return body


def cond(type_: str, status: bool, reason: str, message: str = "") -> Condition:
    return Condition(
        type=type_, status=ConditionStatus.TRUE if status else ConditionStatus.FALSE, reason=reason, message=message
    )


ENDPOINT_CASES: list[tuple[str, EndpointStatus | None, str, str]] = [
    ("no status yet", None, "Progressing", "Waiting for the operator"),
    (
        "waiting for the weights cache",
        EndpointStatus(
            state=EndpointState.DEPLOYMENT_PENDING,
            observed_generation=1,
            weights_cache_status=CacheSummary(state=CacheState.DOWNLOADING, ready_nodes=1, target_nodes=4),
        ),
        "Progressing",
        "weights cache Downloading on 1/4 nodes",
    ),
    (
        "rolling out",
        EndpointStatus(
            state=EndpointState.DEPLOYMENT_IN_PROGRESS,
            observed_generation=1,
            conditions=[cond("Progressing", True, "RollingOut", "1/2 replicas available, 2 updated")],
        ),
        "Progressing",
        "1/2 replicas available",
    ),
    (
        "serving",
        EndpointStatus(
            state=EndpointState.DEPLOYMENT_COMPLETE,
            observed_generation=1,
            conditions=[
                cond("Ready", True, "Serving", "2/2 replicas available, 2 updated"),
                cond("Degraded", False, "AsExpected"),
            ],
        ),
        "Healthy",
        "2/2 replicas available",
    ),
    (
        "serving after the cache deadline: healthy, the message says degraded",
        EndpointStatus(
            state=EndpointState.DEPLOYMENT_COMPLETE,
            observed_generation=1,
            conditions=[
                cond("Ready", True, "Serving", "2/2 replicas available"),
                cond("Degraded", True, "CacheDeadlineExceeded", "weights cache not ready after 3600 s"),
            ],
        ),
        "Healthy",
        "Serving, degraded: weights cache not ready after 3600 s",
    ),
    (
        "gated model without acceptEula",
        EndpointStatus(
            state=EndpointState.DEPLOYMENT_FAILED,
            observed_generation=1,
            conditions=[cond("Ready", False, "EulaNotAccepted", "model is gated: set spec.model.acceptEula: true")],
        ),
        "Degraded",
        "acceptEula",
    ),
    (
        "failed without a message",
        EndpointStatus(state=EndpointState.DEPLOYMENT_FAILED, observed_generation=1),
        "Degraded",
        "DeploymentFailed",
    ),
    (
        "deleting",
        EndpointStatus(state=EndpointState.DELETION_IN_PROGRESS, observed_generation=1),
        "Progressing",
        "DeletionInProgress",
    ),
    (
        "deletion failed",
        EndpointStatus(state=EndpointState.DELETION_FAILED, observed_generation=1),
        "Degraded",
        "DeletionFailed",
    ),
]


@pytest.mark.parametrize("kind", ["InferenceEndpointConfig", "JumpStartModel"])
@pytest.mark.parametrize(("case", "status", "expected", "message"), ENDPOINT_CASES, ids=[c[0] for c in ENDPOINT_CASES])
def test_endpoint_health(kind: str, case: str, status: EndpointStatus | None, expected: str, message: str) -> None:
    result = health(kind, endpoint(kind, status))
    assert result["status"] == expected, (case, result)
    assert message in result["message"], (case, result)


@pytest.mark.parametrize("kind", ["InferenceEndpointConfig", "JumpStartModel"])
def test_a_complete_status_for_an_older_generation_is_still_progressing(kind: str) -> None:
    status = EndpointStatus(
        state=EndpointState.DEPLOYMENT_COMPLETE, observed_generation=1, conditions=[cond("Ready", True, "Serving")]
    )
    result = health(kind, endpoint(kind, status, generation=2))
    assert result == {"status": "Progressing", "message": "Waiting for the operator to observe generation 2"}


CACHE_CASES: list[tuple[CacheState | None, str]] = [
    (None, "Progressing"),
    (CacheState.PENDING, "Progressing"),
    (CacheState.DOWNLOADING, "Progressing"),
    (CacheState.READY, "Healthy"),
    (CacheState.PARTIALLY_READY, "Degraded"),
    (CacheState.FAILED, "Degraded"),
    (CacheState.DELETING, "Progressing"),
]


@pytest.mark.parametrize(("state", "expected"), CACHE_CASES, ids=[str(c[0]) for c in CACHE_CASES])
def test_weights_cache_health(state: CacheState | None, expected: str) -> None:
    status = ModelDataCacheConfigStatus(
        state=state, ready_nodes=2, target_nodes=4, message="InsufficientCapacity on node-3"
    )
    body = {"kind": "ModelDataCacheConfig", "metadata": {"name": "weights-abc"}, "status": status.to_api()}
    result = health("ModelDataCacheConfig", body)
    assert result["status"] == expected
    if state is not None:
        assert result["message"].endswith("2/4 nodes ready: InsufficientCapacity on node-3")


@pytest.mark.parametrize(("state", "expected"), CACHE_CASES, ids=[str(c[0]) for c in CACHE_CASES])
def test_image_cache_health(state: CacheState | None, expected: str) -> None:
    status = ModelImageCacheStatus(state=state, ready_nodes=3, target_nodes=3, image="vllm/vllm-openai:latest")
    result = health(
        "ModelImageCache", {"kind": "ModelImageCache", "metadata": {"name": "image-abc"}, "status": status.to_api()}
    )
    assert result["status"] == expected


def test_cache_without_status_waits_for_the_operator() -> None:
    for kind in ("ModelDataCacheConfig", "ModelImageCache"):
        assert health(kind, {"kind": kind, "metadata": {"name": "x"}}) == {
            "status": "Progressing",
            "message": "Waiting for the operator to report status",
        }


class _Literal(str):
    """A string dumped as a YAML literal block."""


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


def argocd_cm() -> str:
    """The argocd-cm ConfigMap with one health customization per kind, taken verbatim from the Lua files."""
    dumper = type("Dumper", (yaml.SafeDumper,), {})
    dumper.add_representer(_Literal, _literal)
    data = {
        f"resource.customizations.health.{GROUP}_{kind}": _Literal((HEALTH / name).read_text())
        for kind, name in KINDS.items()
    }
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd", "labels": {"app.kubernetes.io/part-of": "argocd"}},
        "data": data,
    }
    header = (
        "# Argo CD health checks for the warmstart kinds. "
        "GENERATED from health/*.lua by tests/unit/test_argocd_health.py\n"
        "# (UPDATE_GOLDEN=1); edit the .lua files. Merge into your argocd-cm, e.g.\n"
        "#   kubectl -n argocd patch configmap argocd-cm --type merge --patch-file argocd-cm.yaml\n"
    )
    return header + yaml.dump(manifest, Dumper=dumper, sort_keys=False, width=120)


def test_shipped_argocd_cm_is_generated_from_the_tested_lua() -> None:
    shipped = ARGOCD / "argocd-cm.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        shipped.write_text(argocd_cm())
    assert shipped.read_text() == argocd_cm(), "examples/07-argocd/argocd-cm.yaml is stale: run with UPDATE_GOLDEN=1"
    data = yaml.safe_load(shipped.read_text())["data"]
    for kind, name in KINDS.items():
        assert data[f"resource.customizations.health.{GROUP}_{kind}"] == (HEALTH / name).read_text()


def test_applications_sync_crds_first_and_server_side() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert app["spec"]["source"]["path"] == "charts/warmstart"
    assert app["spec"]["source"]["helm"]["skipCrds"] is False
    options = app["spec"]["syncPolicy"]["syncOptions"]
    assert "ServerSideApply=true" in options and "SkipDryRunOnMissingResource=true" in options
    models = yaml.safe_load((ARGOCD / "models-application.yaml").read_text())
    wave = "argocd.argoproj.io/sync-wave"
    assert int(app["metadata"]["annotations"][wave]) < int(models["metadata"]["annotations"][wave])
