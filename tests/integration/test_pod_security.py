"""Pod Security on the real control plane: which level each kind of warmstart pod needs (docs/security.md).

Three namespaces enforce `privileged`, `baseline` and `restricted` (the API server's built-in PodSecurity admission).
Every kind of pod warmstart runs is rendered by the real renderers (the operator pod by the real helm) and created as
a bare Pod with `dryRun=All`, so admission decides exactly as it would for the Pods a Deployment, Job or DaemonSet
creates. Each kind must be admitted at the level docs/security.md names and rejected at every stricter one. And no
container warmstart adds to a model pod may be the reason a model pod fails `restricted`: what is left is the hostPath
volume and the user's model server. With cache access `csi`, no tenant pod needs more than baseline (the driver's
inline volume is allowed even by restricted), and the driver's DaemonSet is the only privileged pod.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

import kube
from warmstart.api.caches import ModelDataCacheConfigSpec, ModelImageCacheSpec
from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.preloading import PERMANENT_EXIT_CODES
from warmstart.render import daemonsets, deployments, endpoints, jobs, router
from warmstart.render.context import RenderContext
from warmstart.render.deployments import Generation
from warmstart.render.endpoints import ObjectRef

pytestmark = pytest.mark.cluster

LEVELS = ("privileged", "baseline", "restricted")
#: the least privileged level that admits each kind of pod (docs/security.md, "Pod Security levels")
REQUIRED = {
    "operator": "restricted",
    "router": "restricted",
    "image-prepull": "restricted",
    "model-without-cache": "baseline",
    "model-with-cache": "privileged",
    "model-on-volume": "privileged",
    "preload-job": "privileged",
    "cleanup-job": "privileged",
    # cache access `csi` (render/cache_volumes.py): the cache is the driver's inline volume, baseline admits it
    "model-with-cache-csi": "baseline",
    "preload-job-csi": "restricted",
    "cleanup-job-csi": "restricted",
    "csi-driver": "privileged",
}
CONTEXT = RenderContext(operator_image="warmstart:test")
CSI_CONTEXT = RenderContext(operator_image="warmstart:test", cache_access="csi", job_signing_key="test-key-" * 4)
SEED = kube.ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml"
NVME = kube.ROOT / "examples" / "10-nvme-volume" / "inference-endpoint-config.yaml"


def _endpoint(cache: bool) -> endpoints.Endpoint:
    spec = yaml.safe_load(SEED.read_text())["spec"]
    spec["modelCacheConfig"]["weightsCache"]["enabled"] = cache
    ref = ObjectRef(kind="InferenceEndpointConfig", name="psa", namespace="ns", uid="u-1")
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))


def _on_volume() -> endpoints.Endpoint:
    """HyperPod's kubernetesVolume manifest: the model is the user's hostPath volume."""
    spec = yaml.safe_load(NVME.read_text())["spec"]
    ref = ObjectRef(kind="InferenceEndpointConfig", name="nvme", namespace="ns", uid="u-4")
    return endpoints.from_iec(ref, InferenceEndpointConfigSpec.model_validate(spec))


def _template(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def _chart_pod(helm: pathlib.Path, template: str, kind: str, *values: str) -> dict[str, Any]:
    rendered = subprocess.run(
        [str(helm), "template", "ws", str(kube.ROOT / "charts" / "warmstart"), "--kube-version", "1.37.0",
         "-s", template, *(a for v in values for a in ("--set", v))],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    (workload,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == kind]
    return _template(workload)


def _operator_pod(helm: pathlib.Path) -> dict[str, Any]:
    return _chart_pod(helm, "templates/deployment.yaml", "Deployment")


def pod_specs(helm: pathlib.Path) -> dict[str, dict[str, Any]]:
    """Every kind of pod warmstart creates, as its controller would create it."""
    cached, uncached = _endpoint(True), _endpoint(False)
    generation = Generation(cached.weights_key({}), cached.image_key())
    mdcc = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": cached.source.to_api()})
    owner = jobs.Owner(name="weights-x", namespace="ns", uid="u-2")
    request = jobs.PreloadRequest(owner=owner, key="k" * 12, node="node-0", attempt=1, generation=1)
    mic = ModelImageCacheSpec.model_validate({"image": cached.worker.image})
    mic_owner = daemonsets.Owner(name="image-x", namespace="ns", uid="u-3")
    return {
        "operator": _operator_pod(helm),
        "router": _template(router.deployment(cached, CONTEXT)),
        "image-prepull": _template(daemonsets.daemonset(mic_owner, mic, "k" * 12, CONTEXT)),
        "model-without-cache": _template(deployments.deployment(uncached, generation, CONTEXT)),
        "model-with-cache": _template(deployments.deployment(cached, generation, CONTEXT)),
        "model-on-volume": _template(deployments.deployment(_on_volume(), generation, CONTEXT)),
        "preload-job": _template(jobs.preload_job(request, mdcc, CONTEXT, sorted(PERMANENT_EXIT_CODES.values()))),
        "cleanup-job": _template(jobs.cleanup_job(owner, "k" * 12, "node-0", mdcc, CONTEXT)),
        "model-with-cache-csi": _template(deployments.deployment(cached, generation, CSI_CONTEXT)),
        "preload-job-csi": _template(
            jobs.preload_job(request, mdcc, CSI_CONTEXT, sorted(PERMANENT_EXIT_CODES.values()))
        ),
        "cleanup-job-csi": _template(jobs.cleanup_job(owner, "k" * 12, "node-0", mdcc, CSI_CONTEXT)),
        "csi-driver": _chart_pod(helm, "templates/csi.yaml", "DaemonSet", "cache.access=csi"),
    }


@pytest.fixture
def level_namespaces(api_client: client.ApiClient) -> Iterator[dict[str, str]]:
    core = client.CoreV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    made = {level: f"psa-{level}-{suffix}" for level in LEVELS}
    for level, name in made.items():
        labels = {"pod-security.kubernetes.io/enforce": level, "warmstart.io/test": "true"}
        core.create_namespace({"metadata": {"name": name, "labels": labels}})
    try:
        yield made
    finally:
        for name in made.values():
            core.delete_namespace(name)


def _admit(api: client.ApiClient, namespace: str, kind: str, spec: dict[str, Any]) -> str | None:
    """Create the pod with dryRun=All; None when admitted, else the rejection message."""
    # not Pod Security's business: these name objects (ServiceAccount, PriorityClass) this test does not create
    body = {k: v for k, v in spec.items() if k not in ("serviceAccountName", "priorityClassName")}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": kind, "namespace": namespace}, "spec": body}
    try:
        client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")
    except client.ApiException as error:
        assert error.status == 403, error.body
        return str(json.loads(error.body)["message"])
    return None


def test_each_pod_kind_is_admitted_exactly_down_to_its_documented_level(
    api_client: client.ApiClient, helm: pathlib.Path, level_namespaces: dict[str, str]
) -> None:
    specs = pod_specs(helm)
    assert set(specs) == set(REQUIRED)
    outcome = {
        (kind, level): _admit(api_client, level_namespaces[level], kind, spec)
        for kind, spec in specs.items()
        for level in LEVELS
    }
    for (kind, level), rejection in outcome.items():
        expected = LEVELS.index(level) <= LEVELS.index(REQUIRED[kind])
        assert (rejection is None) == expected, f"{kind} at {level}: {rejection or 'admitted'}"
    # the cache is why caching model pods and Jobs need privileged: baseline refuses hostPath volumes
    for kind in ("model-with-cache", "model-on-volume", "preload-job", "cleanup-job"):
        assert "hostPath volumes" in (outcome[(kind, "baseline")] or ""), outcome[(kind, "baseline")]
    # what keeps a model pod from restricted is the hostPath, the CHOWN-only cache owner (with the cache only) and the
    # user's model server, never warmstart's preload: it runs non-root, without capabilities, and cannot escalate
    for kind in ("model-with-cache", "model-without-cache"):
        rejection = outcome[(kind, "restricted")] or ""
        assert f'"{deployments.INIT_CONTAINER}"' not in rejection, rejection
        assert '"worker"' in rejection, rejection
    assert '"warmstart-cache-owner"' in (outcome[("model-with-cache", "restricted")] or "")
    assert '"warmstart-cache-owner"' not in (outcome[("model-without-cache", "restricted")] or "")
    # the only root in a Job is the CHOWN-only ownership step
    assert 'container "warmstart-cache-owner"' in (outcome[("preload-job", "restricted")] or "")
    assert 'container "preload"' not in (outcome[("preload-job", "restricted")] or "")
    # with the CSI driver, a caching model pod misses restricted only through the user's model server
    rejection = outcome[("model-with-cache-csi", "restricted")] or ""
    assert '"worker"' in rejection and "volume" not in rejection and "warmstart" not in rejection, rejection
