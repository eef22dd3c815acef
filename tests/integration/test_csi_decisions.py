"""The CSI driver's mount decisions on the real control plane: real caches, a real signed Job and the pod the Job
controller made from it, and pods a tenant forges (no node involved: the driver's reads and its decision).

- the pod the Job controller creates from the operator's signed preload Job gets its key's tree read-write (so the
  API server's defaulting leaves a Job's pod equal to its template in every field the driver compares);
- a pod a tenant creates with a controller reference to that same Job, running something else, is denied;
- a Job a tenant creates with the operator's name is never signed, and a signature copied onto it does not fit;
- a model pod of the cache's namespace reads it; one of another namespace, naming the same key, is denied;
- a public key that two namespaces cache: through the driver's gRPC service and a real bind mount, the namespace
  whose preload proved its access on the node reads it, the other waits (UNAVAILABLE) until its own preload did (the
  driver reads each preload's proof when the kubelet unpublishes its volume); new content in the key is mounted for
  neither until each proves it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import pathlib
import uuid
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from kubernetes import client

import kube
from test_weights_cache import crds  # noqa: F401 - autouse: installs the CRDs
from warmstart.api import API_VERSION, GROUP, VERSION
from warmstart.api.caches import MDCC_KIND, MDCC_PLURAL, ModelDataCacheConfigSpec
from warmstart.api.preloading import PERMANENT_EXIT_CODES
from warmstart.controllers import signing
from warmstart.controllers.storage import Store
from warmstart.csi import decisions, lookups, mounting, nodeservice, proofs
from warmstart.csi.protos import csi_pb2, csi_pb2_grpc
from warmstart.preload import store
from warmstart.render import jobs, keys, signatures
from warmstart.render.context import RenderContext

pytestmark = pytest.mark.cluster

ROOT = "/opt/dlami/nvme"
NODE = "csi-node-1"
SIGNING_KEY = "integration-signing-key-of-32-chars"
CONTEXT = RenderContext(operator_image="warmstart:test", cache_access="csi", job_signing_key=SIGNING_KEY)
SOURCE = {"modelSourceType": "s3", "s3Storage": {"bucketName": "bucket", "region": "us-west-2"}, "modelLocation": "m"}


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"csi-other-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"warmstart.io/test": "true"}}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def _driver(api: client.ApiClient) -> nodeservice.Node:
    settings = nodeservice.Settings(
        node=NODE, allowed_roots=(ROOT,), groups={}, signing_key=SIGNING_KEY.encode(), csi_endpoint="/csi.sock"
    )
    return nodeservice.Node(settings, lookups.Lookups(api))


def _context(pod: dict[str, Any], key: str, access: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {
        decisions.POD_NAME: meta["name"],
        decisions.POD_NAMESPACE: meta["namespace"],
        decisions.POD_UID: meta["uid"],
        decisions.SERVICE_ACCOUNT: pod["spec"].get("serviceAccountName", "default"),
        decisions.EPHEMERAL: "true",
        decisions.KEY_ATTRIBUTE: key,
        decisions.ACCESS_ATTRIBUTE: access,
    }


def _create_cache(api: client.ApiClient, namespace: str) -> tuple[dict[str, Any], str]:
    spec = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": SOURCE, "hostPath": ROOT})
    key = keys.weights_key_in(spec.model_source_config, ROOT, namespace, {})
    manifest = {
        "apiVersion": API_VERSION,
        "kind": MDCC_KIND,
        "metadata": {"name": keys.weights_cache_name(key), "namespace": namespace},
        "spec": {"modelSourceConfig": SOURCE, "hostPath": ROOT},
    }
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, MDCC_PLURAL, manifest
    )
    return created, key


def _job_pod(core: client.CoreV1Api, namespace: str, job: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        return core.api_client.sanitize_for_serialization(pods[0]) if pods else None

    found: dict[str, Any] = kube.wait_for(probe, what=f"the pod of Job {job}")
    return found


def test_only_the_pod_of_the_operators_signed_job_writes_and_only_the_caches_namespace_reads(
    api_client: client.ApiClient, namespace: str, other_namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    cache, key = _create_cache(api_client, namespace)
    spec = ModelDataCacheConfigSpec.model_validate(cache["spec"])
    owner = jobs.Owner(name=cache["metadata"]["name"], namespace=namespace, uid=cache["metadata"]["uid"])
    request = jobs.PreloadRequest(owner=owner, key=key, node=NODE, attempt=1, generation=1)
    manifest = jobs.preload_job(request, spec, CONTEXT, sorted(PERMANENT_EXIT_CODES.values()))
    signing.apply_job(Store(api_client), manifest, key, NODE, CONTEXT)
    driver = _driver(api_client)

    # the operator's Job, as the Job controller runs it: read-write on its key's tree, nothing else of the node
    pod = _job_pod(core, namespace, manifest["metadata"]["name"])
    granted = driver.decide(_context(pod, key, decisions.WRITE), read_only=False)
    expected = (decisions.Verdict.MOUNT, f"{ROOT}/warmstart/keys/{key}", False)
    assert (granted.verdict, granted.path, granted.read_only) == expected

    # a tenant's pod naming the operator's Job as its controller, running its own command: denied
    forged = copy.deepcopy(pod)
    forged["metadata"] = {
        "name": "forged",
        "namespace": namespace,
        "ownerReferences": pod["metadata"]["ownerReferences"],
    }
    forged["spec"]["containers"][0]["command"] = ["sh", "-c", "echo poison > /cache/x"]
    forged.pop("status", None)
    forged["spec"].pop("nodeName", None)
    created = core.api_client.sanitize_for_serialization(core.create_namespaced_pod(namespace, forged))
    denied = driver.decide(_context(created, key, decisions.WRITE), read_only=False)
    assert denied.verdict == decisions.Verdict.DENIED, denied
    assert "containers differs" in denied.message

    # a tenant's Job under the operator's next name, carrying a copy of the operator's signature: denied
    copied = copy.deepcopy(manifest)
    copied["metadata"]["name"] = jobs.preload_job_name(key, NODE, 2)
    copied["metadata"]["labels"][jobs.ATTEMPT_LABEL] = "2"
    copied["spec"]["template"]["metadata"]["labels"][jobs.ATTEMPT_LABEL] = "2"
    signature = client.BatchV1Api(api_client).read_namespaced_job(manifest["metadata"]["name"], namespace)
    copied["metadata"]["annotations"][signatures.ANNOTATION] = signature.metadata.annotations[signatures.ANNOTATION]
    client.BatchV1Api(api_client).create_namespaced_job(namespace, copied)
    tenant_pod = _job_pod(core, namespace, copied["metadata"]["name"])
    refused = driver.decide(_context(tenant_pod, key, decisions.WRITE), read_only=False)
    assert refused.verdict == decisions.Verdict.DENIED, refused
    assert "no valid operator signature" in refused.message

    # readers: the cache's own namespace reads it; another namespace naming the same key does not
    reader = {"metadata": {"name": "model-0", "namespace": namespace, "uid": "u1"}, "spec": {}}
    allowed = driver.decide(_context(reader, key, decisions.READ), read_only=True)
    assert (allowed.verdict, allowed.path) == (decisions.Verdict.MOUNT, f"{ROOT}/warmstart/keys/{key}/model")
    thief = {"metadata": {"name": "thief", "namespace": other_namespace, "uid": "u2"}, "spec": {}}
    stolen = driver.decide(_context(thief, key, decisions.READ), read_only=True)
    assert stolen.verdict == decisions.Verdict.DENIED
    assert f"namespace {other_namespace} has no ModelDataCacheConfig with key {key}" in stolen.message


HUB = {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": "org/shared-model"}}


@pytest.fixture
def node_driver(api_client: client.ApiClient, tmp_path: pathlib.Path) -> Iterator[tuple[grpc.Channel, pathlib.Path]]:
    """The driver's gRPC services on a unix socket, reading the real API server, with a temporary cache root."""
    root = tmp_path / "nvme"
    root.mkdir()
    socket = tmp_path / "csi.sock"
    settings = nodeservice.Settings(
        node=NODE, allowed_roots=(str(root),), groups={}, signing_key=SIGNING_KEY.encode(), csi_endpoint=str(socket)
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    csi_pb2_grpc.add_NodeServicer_to_server(nodeservice.Node(settings, lookups.Lookups(api_client)), server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            yield channel, root
    finally:
        server.stop(grace=None)


def _publish(channel: grpc.Channel, context: dict[str, str], target: pathlib.Path) -> grpc.RpcError | None:
    request = csi_pb2.NodePublishVolumeRequest(
        volume_id=f"csi-{uuid.uuid4().hex[:6]}", target_path=str(target), readonly=True, volume_context=context
    )
    try:
        csi_pb2_grpc.NodeStub(channel).NodePublishVolume(request, timeout=30)
    except grpc.RpcError as error:
        return error
    return None


def test_a_namespace_sharing_a_public_key_reads_it_only_where_its_own_preload_proved_its_access(
    api_client: client.ApiClient, namespace: str, other_namespace: str, node_driver: tuple[grpc.Channel, pathlib.Path]
) -> None:
    channel, root = node_driver
    objects = client.CustomObjectsApi(api_client)
    found = set()
    for space in (namespace, other_namespace):
        spec = ModelDataCacheConfigSpec.model_validate({"modelSourceConfig": HUB, "hostPath": str(root)})
        found.add(keys.weights_key_in(spec.model_source_config, str(root), space, {}))
        manifest = {
            "apiVersion": API_VERSION,
            "kind": MDCC_KIND,
            "metadata": {"name": "shared", "namespace": space},
            "spec": {"modelSourceConfig": HUB, "hostPath": str(root)},
        }
        objects.create_namespaced_custom_object(GROUP, VERSION, space, MDCC_PLURAL, manifest)
    (key,) = found  # a public model: one key for every namespace
    # the first namespace's preload filled the node and proved its access there
    lay = store.layout(str(root), key)
    os.makedirs(lay.final)
    pathlib.Path(lay.final, "config.json").write_text('{"model": "shared"}')
    pathlib.Path(lay.manifest_path).write_text('{"key": "shared"}')
    proven = hashlib.sha256(pathlib.Path(lay.manifest_path).read_bytes()).hexdigest()
    _writer_ends(channel, root, namespace, key, proven)

    def reader(space: str) -> dict[str, str]:
        pod = {"metadata": {"name": "model-0", "namespace": space, "uid": uuid.uuid4().hex}, "spec": {}}
        return _context(pod, key, decisions.READ)

    # the second namespace names the same key: it waits (the kubelet retries) and never sees the bytes
    target = root.parent / "pods" / "b" / "model"
    refused = _publish(channel, reader(other_namespace), target)
    assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE, refused
    assert f"namespace {other_namespace} has not proven its access" in (refused.details() or "")
    assert not os.path.ismount(target)

    # the namespace that proved its access reads it, read-only
    mine = root.parent / "pods" / "a" / "model"
    assert _publish(channel, reader(namespace), mine) is None
    try:
        assert (mine / "config.json").read_text() == '{"model": "shared"}'
    finally:
        mounting.unbind(str(mine))

    # once its own preload proved its access, the second namespace reads it too
    _writer_ends(channel, root, other_namespace, key, proven)
    assert _publish(channel, reader(other_namespace), target) is None
    mounting.unbind(str(target))

    # new content published in the key: neither namespace proved it, so neither mounts it until its preload does
    pathlib.Path(lay.manifest_path).write_text('{"key": "shared", "republished": true}')
    again = root.parent / "pods" / "c" / "model"
    refused = _publish(channel, reader(namespace), again)
    assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE, refused
    assert "current content" in (refused.details() or "")


def _writer_ends(channel: grpc.Channel, root: pathlib.Path, namespace: str, key: str, proven: str) -> None:
    """A preload pod of `namespace` that proved `proven` ends: the kubelet unpublishes its volume, and the driver,
    which recorded the mount when it published it, reads the proof the pod left in the key's tree."""
    uid = str(uuid.uuid4())
    volume = f"csi-{uuid.uuid4().hex[:6]}"
    proofs.remember(str(root), volume, decisions.WriterMount(namespace, uid, key, str(root), jobs.ROLE_PRELOAD))
    results = pathlib.Path(store.layout(str(root), key).results_dir)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{uid}.json").write_text(
        json.dumps({"outcome": "Succeeded", "reason": "AlreadyPresent", "manifestSha256": proven})
    )
    target = root.parent / "pods" / uid / "cache"
    target.mkdir(parents=True)
    request = csi_pb2.NodeUnpublishVolumeRequest(volume_id=volume, target_path=str(target))
    csi_pb2_grpc.NodeStub(channel).NodeUnpublishVolume(request, timeout=30)
