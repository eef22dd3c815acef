"""Helpers for the real-node e2e tests: a synthetic model in the S3 server, the chart installed on the real node.

The session installs the chart once (`real_stack` in conftest.py): the project image, built from the Dockerfile and
pushed to the local registry, runs the operator pod on the real node; the operator watches one namespace of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pathlib
import random
import shutil
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import yaml
from kubernetes import client

import helming
from warmstart.api import GROUP, VERSION, nodelabels
from warmstart.localcluster import nodeplans, objectstore, running

T = TypeVar("T")

PLURAL = "inferenceendpointconfigs"
REAL_SELECTOR = {nodeplans.REAL_NODE_LABEL: "true"}
#: the real node's instance type (``warmstart cluster up --real-nodes``); no kwok node has it
INSTANCE_TYPE = "ml.g5.xlarge"
SIM_PORT = 8000
#: the simulator's readiness path, given as the endpoint's loadBalancer.healthCheckPath
HEALTH_PATH = "/health"
MOUNT_PATH = "/opt/ml/model"
MiB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ModelFile:
    path: str
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Model:
    """A synthetic model uploaded under ``s3://bucket/prefix/``."""

    bucket: str
    prefix: str
    files: tuple[ModelFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def upload_model(s3: objectstore.Endpoint, bucket: str, prefix: str, sizes: dict[str, int], seed: int) -> Model:
    """Deterministic pseudo-random bytes (``seed``) in one object per ``sizes`` entry; returns what was uploaded."""
    s3_client = s3.client()
    rng = random.Random(seed)
    files = []
    for path, size in sizes.items():
        block = rng.randbytes(MiB)  # one random MiB, then varied per MiB: cheap, deterministic, not compressible
        body = b"".join(i.to_bytes(8, "little") + block[8:] for i in range(size // MiB)) + block[: size % MiB]
        files.append(ModelFile(path, size, hashlib.sha256(body).hexdigest()))
        s3_client.upload_fileobj(io.BytesIO(body), bucket, f"{prefix}/{path}")
    return Model(bucket, prefix, tuple(files))


def delete_bucket(s3: objectstore.Endpoint, bucket: str) -> None:
    s3_client = s3.client()
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents") or []:
            s3_client.delete_object(Bucket=bucket, Key=item["Key"])
    s3_client.delete_bucket(Bucket=bucket)


def eventually(
    probe: Callable[[], T | None], what: str, timeout: float = 180.0, explain: Callable[[], str] | None = None
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``explain()`` (e.g. the operator's log) if not."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = explain() if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{detail}")
        time.sleep(1.0)


@dataclasses.dataclass
class Stack:
    """The chart installed on the real node, in ``namespace``, watching only that namespace."""

    cluster: running.Cluster
    api: client.ApiClient
    namespace: str
    release: str
    image: str
    shellless_image: str
    bucket: str
    hostpath_root: pathlib.Path
    #: weights keys this session preloaded; their node labels are removed at the end if the operator left them
    weights_keys: list[str] = dataclasses.field(default_factory=list)

    @property
    def real(self) -> Any:
        return self.cluster.real

    @property
    def node(self) -> str:
        return str(self.real.names[0])

    @property
    def deployment(self) -> str:
        return f"{self.release}-warmstart"

    def operator_log(self, lines: int = 80) -> str:
        core = client.CoreV1Api(self.api)
        pods = core.list_namespaced_pod(self.namespace, label_selector="app.kubernetes.io/component=operator").items
        if not pods:
            pods = [
                p for p in core.list_namespaced_pod(self.namespace).items if p.metadata.name.startswith(self.deployment)
            ]
        out = []
        for pod in pods:
            try:
                log = core.read_namespaced_pod_log(pod.metadata.name, self.namespace, tail_lines=lines)
            except client.ApiException as error:
                log = f"(no log: {error.reason})"
            out.append(f"--- {pod.metadata.name} ({pod.status.phase}) ---\n{log}")
        return "\n".join(out)

    def describe(self) -> str:
        """Pods and their container states, plus the operator's log: what a failed wait prints."""
        lines = []
        for pod in client.CoreV1Api(self.api).list_namespaced_pod(self.namespace).items:
            lines.append(f"pod {pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase}")
            for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
                lines.append(f"  {status.name}: ready={status.ready} state={status.state.to_dict()}")
        return "\n".join(lines) + "\n" + self.operator_log()

    def endpoint(self, name: str) -> dict[str, Any] | None:
        body = helming.get_or_none(
            lambda: helming.custom(self.api).get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        )
        return None if body is None else dict(body)

    def create_endpoint(self, manifest: dict[str, Any]) -> None:
        helming.custom(self.api).create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, manifest)

    def remove_endpoints(self, names: list[str], keep_pods: set[str], timeout: float = 240.0) -> None:
        """Delete the endpoints `names` and wait until they and every pod not in `keep_pods` (uids) are gone, the
        operator's excepted: what a test leaves on the one real node would hold its CPU and memory, and its Job pods
        would show up in a later test's listing."""
        for name in names:
            helming.get_or_none(
                lambda n=name: helming.custom(self.api).delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, n
                )
            )

        def gone() -> bool:
            pods = client.CoreV1Api(self.api).list_namespaced_pod(self.namespace).items
            left = [
                p.metadata.name
                for p in pods
                if p.metadata.uid not in keep_pods and not p.metadata.name.startswith(self.deployment)
            ]
            return not left and all(self.endpoint(n) is None for n in names)

        eventually(gone, f"the endpoints {names} and their pods removed", timeout, self.describe)

    def wait_state(self, name: str, state: str, timeout: float = 300.0) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            body = self.endpoint(name)
            return body if body and (body.get("status") or {}).get("state") == state else None

        return eventually(probe, f"endpoint {name} to reach {state}", timeout, self.describe)

    def ready_pods(self, selector: str, count: int, timeout: float = 300.0) -> list[Any]:
        core = client.CoreV1Api(self.api)

        def probe() -> list[Any] | None:
            pods = core.list_namespaced_pod(self.namespace, label_selector=selector).items
            ready = [
                p
                for p in pods
                if p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ]
            return ready if len(ready) >= count else None

        return eventually(probe, f"{count} Ready pods with {selector}", timeout, self.describe)


def sim_endpoint(
    name: str,
    stack: Stack,
    model: Model,
    *,
    replicas: int,
    weights: bool,
    host_path: str,
    router: bool,
    kubernetes: dict[str, Any] | None = None,
    max_deploy_seconds: int | None = None,
) -> dict[str, Any]:
    """An endpoint whose model server is `warmstart sim` from the project image, reading the cache at MOUNT_PATH.

    ``kubernetes`` is the endpoint's `kubernetes` block (e.g. tolerations for its pods); ``max_deploy_seconds`` its
    `maxDeployTimeInSeconds` (how long the gate waits for the weights cache).
    """
    real = stack.real
    spec: dict[str, Any] = {
        "modelName": name,
        "instanceType": INSTANCE_TYPE,
        "replicas": replicas,
        "modelSourceConfig": {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": model.bucket, "region": real.s3.region, "endpointUrl": real.s3.pod_url},
            "modelLocation": model.prefix,
        },
        "modelCacheConfig": {
            "weightsCache": {"enabled": weights, "hostPath": host_path, "modelSizeBytes": model.total_bytes},
            "imageCache": {"enabled": True},
        },
        "worker": {
            "image": stack.image,
            "args": [
                "sim",
                "--host",
                "0.0.0.0",
                "--base-port",
                str(SIM_PORT),
                "--model-dir",
                MOUNT_PATH,
                "--name-prefix",
                "$(POD_NAME)-",
            ],
            "environmentVariables": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "modelInvocationPort": {"containerPort": SIM_PORT, "name": "http"},
            "modelVolumeMount": {"name": "model-weights", "mountPath": MOUNT_PATH},
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        },
        # no readiness probe: the operator's default one GETs this path (503 until the weights are read)
        "loadBalancer": {"healthCheckPath": HEALTH_PATH},
    }
    if router:
        spec["intelligentRoutingSpec"] = {"enabled": True, "routingStrategy": "prefixaware"}
    if kubernetes is not None:
        spec["kubernetes"] = kubernetes
    if max_deploy_seconds is not None:
        spec["maxDeployTimeInSeconds"] = max_deploy_seconds
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceEndpointConfig",
        "metadata": {"name": name, "namespace": stack.namespace},
        "spec": spec,
    }


#: the cache roots (hostPaths) the e2e endpoints with weights caching use, under the session's directory: each must be
#: allowed exactly, so the chart lists them all; `smollm2` is the engine endpoint's; `nvme-models` is the root under
#: which the HyperPod-style endpoint's own model directory lies (a pass-through hostPath must lie strictly under an
#: allowed root)
CACHE_ROOTS = ("seed", "cold", "kill-preload", "nvme-models", "smollm2", "kv-events")


def chart_values(
    stack_namespace: str, image: str, suffix: str, s3: objectstore.Endpoint, hostpath_root: pathlib.Path
) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "watchNamespaces": [stack_namespace],
        # the cache roots of the tests, in the session's own directory on the real node (the admission policy and the
        # operator refuse any other root, and a path under one)
        # this stack tests cache access `hostPath` (the init-container fallback, the node's directory shown to pods);
        # test_real_node_csi.py installs the chart's default, `csi`
        "cache": {"access": "hostPath", "allowedHostPaths": [str(hostpath_root / name) for name in CACHE_ROOTS]},
        "operator": {"resyncSeconds": 2},
        "nodeSelector": REAL_SELECTOR,
        "router": {"nodeSelector": REAL_SELECTOR},
        "prepull": {"priorityClass": {"name": f"warmstart-prepull-{suffix}"}},
        # the local S3 server's keys (loopback-only, made up per cluster); a real install uses IRSA instead
        "preload": {
            "env": {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region}
        },
    }


def install(
    helm: pathlib.Path, cluster: running.Cluster, api: client.ApiClient, image: str, shellless: str, work: pathlib.Path
) -> Stack:
    suffix = uuid.uuid4().hex[:8]
    namespace = f"e2e-real-{suffix}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace, "labels": {"warmstart.io/test": "true"}}})
    real = cluster.real
    assert real is not None
    bucket = f"e2e-real-{suffix}"
    objectstore.create_bucket(real.s3, bucket)
    hostpath_root = pathlib.Path(real.hostpath_root) / namespace
    for name in CACHE_ROOTS:  # a cache root exists on the node before any pod mounts it (hostPath type Directory)
        (hostpath_root / name).mkdir(parents=True, exist_ok=True)
    stack = Stack(cluster, api, namespace, f"ws-{suffix}", image, shellless, bucket, hostpath_root)
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(namespace, image, suffix, real.s3, hostpath_root)))
    helming.run_helm(
        helm,
        pathlib.Path(cluster.kubeconfig),
        "install",
        stack.release,
        str(helming.CHART),
        "-n",
        namespace,
        "-f",
        str(values),
    )
    return stack


def uninstall(helm: pathlib.Path, stack: Stack) -> None:
    """Delete the endpoints while the operator runs (so it removes its finalizers and caches), then the release."""
    objects = helming.custom(stack.api)
    for item in objects.list_namespaced_custom_object(GROUP, VERSION, stack.namespace, PLURAL)["items"]:
        objects.delete_namespaced_custom_object(GROUP, VERSION, stack.namespace, PLURAL, item["metadata"]["name"])
    try:
        eventually(
            lambda: not objects.list_namespaced_custom_object(GROUP, VERSION, stack.namespace, PLURAL)["items"],
            "the endpoints to be deleted",
            120,
        )
    finally:
        helming.run_helm(
            helm, pathlib.Path(stack.cluster.kubeconfig), "uninstall", stack.release, "-n", stack.namespace, check=False
        )
        _release_finalizers(stack)
        core = client.CoreV1Api(stack.api)
        core.delete_namespace(stack.namespace, propagation_policy="Background")
        gone = {nodelabels.weights_ready_label(key): None for key in stack.weights_keys}
        if gone:
            core.patch_node(stack.node, {"metadata": {"labels": gone}})
        delete_bucket(stack.real.s3, stack.bucket)
        # after the namespace, so no preload --delete Job of ours recreates the directory
        eventually(
            lambda: not core.list_namespace(field_selector=f"metadata.name={stack.namespace}").items,
            f"namespace {stack.namespace} to be deleted",
            120,
        )
        shutil.rmtree(stack.hostpath_root, ignore_errors=True)


def _release_finalizers(stack: Stack) -> None:
    objects = helming.custom(stack.api)
    for plural in (PLURAL, "modeldatacacheconfigs", "modelimagecaches"):
        for item in objects.list_namespaced_custom_object(GROUP, VERSION, stack.namespace, plural)["items"]:
            if item["metadata"].get("finalizers"):
                objects.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    stack.namespace,
                    plural,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
