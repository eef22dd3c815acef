"""Cache access `csi` on the real node: the real kubelet calls warmstart's CSI driver, and tenants need only baseline.

The chart is installed with `cache.access: csi` in a namespace of its own (the driver's DaemonSet is the one
privileged pod); the tenant's namespace enforces Pod Security `baseline`. There:

- the operator's preload Job (non-root, no hostPath) gets the cache root read-write from the driver, which checked
  the operator's signature on it, and downloads the model from the S3 server;
- the model pod (`warmstart sim`, which reads every weight file before it turns Ready) gets its key's directory
  read-only from the driver, and runs no warmstart init container;
- the model pod answers a completion;
- a pod in ANOTHER baseline namespace that names the tenant's key gets a FailedMount Event from the kubelet and never
  starts; a pod of the tenant's own namespace that asks to write is refused at admission (the chart's policy);
- a namespace of the tenant's trust group (`cacheSharing.namespaceGroups`) that caches the same model shares the
  key: its own preload Job proves its access on the node (AlreadyPresent, nothing downloaded again), the driver
  records the peer as a reader of that content when the Job's pod ends, and only then does its model pod get the key's
  directory, and serve;
- a running preload pod (its source hangs) is out of a tenant's reach: with the built-in `edit` role, a copy of it,
  a patch of its image and `kubectl exec` into it are refused; on the node its mount is a bind of its key's own tree
  and nothing else; a reader mark forged in that tree (all a compromised writer could write) is never read, and the
  namespace it names still gets no bytes.

Nothing is simulated: the kubelet registers the driver through its plugin watcher and calls NodePublishVolume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

import helming
import realstack
import sourcefaults
from warmstart.api import GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL
from warmstart.localcluster import kubeconfigs, objectstore, running
from warmstart.render import cache_volumes, labels

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.realnode,
]

SIZES = {"config.json": 4096, "model.safetensors": 16 * realstack.MiB}
#: the endpoint, and its cache root (the chart's only allowed cache root)
NAME = "csi-sim"
BASELINE = {"pod-security.kubernetes.io/enforce": "baseline", "warmstart.io/test": "true"}


class CsiStack(realstack.Stack):
    """The csi release: the operator and the driver in `system`, endpoints in the baseline `namespace`; `peer` and
    `late` are baseline namespaces of the tenant's trust group, `other` one outside it."""

    system: str = ""
    other: str = ""
    peer: str = ""
    late: str = ""

    def view(self, namespace: str) -> CsiStack:
        """The same release, with endpoints in `namespace`."""
        found = dataclasses.replace(self, namespace=namespace)
        found.system, found.other, found.peer, found.late = self.system, self.other, self.peer, self.late
        return found

    def describe(self) -> str:
        core = client.CoreV1Api(self.api)
        out = []
        for namespace in (self.namespace, self.system, self.other, self.peer, self.late):
            for pod in core.list_namespaced_pod(namespace).items:
                out.append(f"pod {namespace}/{pod.metadata.name}: {pod.status.phase}")
                for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
                    out.append(f"  {status.name}: {status.state.to_dict()}")
            for event in core.list_namespaced_event(namespace).items[-15:]:
                out.append(f"  event {event.reason}: {event.message}")
            for pod in core.list_namespaced_pod(self.system).items if namespace == self.system else []:
                for container in pod.spec.containers:
                    try:
                        log = core.read_namespaced_pod_log(
                            pod.metadata.name, self.system, container=container.name, tail_lines=30
                        )
                    except client.ApiException as error:
                        log = f"(no log: {error.reason})"
                    out.append(f"--- {pod.metadata.name}/{container.name} ---\n{log}")
        return "\n".join(out)


def _values(stack: CsiStack, cluster: running.Cluster, s3: objectstore.Endpoint, suffix: str) -> dict[str, Any]:
    values = realstack.chart_values(stack.namespace, stack.image, suffix, s3, stack.hostpath_root)
    values["watchNamespaces"] = [stack.namespace, stack.other, stack.peer, stack.late]
    values["cacheSharing"] = {"namespaceGroups": {"team": [stack.namespace, stack.peer, stack.late]}}
    del values["cache"]["access"]  # the chart's default: csi
    values["cache"]["allowedHostPaths"] = [str(stack.hostpath_root / NAME)]  # a cache's hostPath equals its root
    values["csi"] = {
        "kubeletDir": str(cluster.real.plan.nodes[0].kubelet_root),
        "nodeSelector": realstack.REAL_SELECTOR,
    }
    return values


@pytest.fixture(scope="module")
def csi_stack(
    real_clusters: Any, real_images: tuple[str, str], helm: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CsiStack]:
    cluster = real_clusters.get()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    suffix = uuid.uuid4().hex[:8]
    system, tenant, other = f"csi-system-{suffix}", f"csi-tenant-{suffix}", f"csi-other-{suffix}"
    peer, late = f"csi-peer-{suffix}", f"csi-late-{suffix}"
    core.create_namespace({"metadata": {"name": system, "labels": {"warmstart.io/test": "true"}}})
    for namespace in (tenant, other, peer, late):
        core.create_namespace({"metadata": {"name": namespace, "labels": BASELINE}})
    bucket = f"csi-{suffix}"
    objectstore.create_bucket(cluster.real.s3, bucket)
    root = pathlib.Path(cluster.real.hostpath_root) / tenant
    image, shellless = real_images
    stack = CsiStack(cluster, api, tenant, f"csi-{suffix}", image, shellless, bucket, root)
    (root / NAME).mkdir(parents=True, exist_ok=True)  # the cache root exists on the node before anything mounts it
    stack.system, stack.other, stack.peer, stack.late = system, other, peer, late
    values = tmp_path_factory.mktemp("csi") / "values.yaml"
    values.write_text(yaml.safe_dump(_values(stack, cluster, cluster.real.s3, suffix)))
    kubeconfig = pathlib.Path(cluster.kubeconfig)
    helming.run_helm(helm, kubeconfig, "install", stack.release, str(helming.CHART), "-n", system, "-f", str(values))
    try:
        yield stack
    finally:
        try:
            realstack.uninstall(helm, stack)  # endpoints first (the operator cleans up), then the release
        finally:
            helming.run_helm(helm, kubeconfig, "uninstall", stack.release, "-n", system, check=False)
            for namespace in (system, other, peer, late):
                core.delete_namespace(namespace, propagation_policy="Background")
            api.close()
            shutil.rmtree(root, ignore_errors=True)


def _events(core: client.CoreV1Api, namespace: str, pod: str) -> list[str]:
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return [f"{e.reason}: {e.message}" for e in found]


def _completion(pod_ip: str) -> dict[str, Any]:
    """One completion from the simulator pod (it answers only once it has read every weight file)."""
    body = json.dumps({"model": "seed", "prompt": "a prompt", "max_tokens": 4}).encode()
    url = f"http://{pod_ip}:{realstack.SIM_PORT}/v1/completions"
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        found: dict[str, Any] = json.load(answer)
        return found


def _reader_pod(name: str, key: str, image: str, access: str = cache_volumes.READ) -> dict[str, Any]:
    volume = cache_volumes.csi_volume("stolen", key, write=access == cache_volumes.WRITE)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": realstack.REAL_SELECTOR,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "reader",
                    "image": image,
                    "command": ["warmstart", "--help"],
                    "volumeMounts": [{"name": "stolen", "mountPath": "/stolen"}],
                }
            ],
            "volumes": [volume],
        },
    }


def test_a_baseline_tenant_preloads_and_serves_through_the_driver_and_another_namespace_gets_no_bytes(
    csi_stack: CsiStack,
) -> None:
    stack = csi_stack
    core = client.CoreV1Api(stack.api)
    name = NAME
    model = realstack.upload_model(stack.real.s3, stack.bucket, f"models/{name}", SIZES, seed=22)
    host_path = str(stack.hostpath_root / name)
    stack.create_endpoint(
        realstack.sim_endpoint(name, stack, model, replicas=1, weights=True, host_path=host_path, router=False)
    )
    body = stack.wait_state(name, "DeploymentComplete", timeout=420)
    key = body["status"]["resolved"]["weightsCacheKey"]
    (pod,) = stack.ready_pods(f"{labels.ENDPOINT_LABEL}={name},{labels.COMPONENT}=model-server", 1, timeout=300)

    # the model pod serves from the weights the driver mounted
    assert _completion(pod.status.pod_ip)["choices"], "no completion"

    # the model pod: the driver's read-only volume of its key, no hostPath, no warmstart init container
    volumes = [v.to_dict() for v in pod.spec.volumes]
    assert not [v for v in volumes if v.get("host_path")], volumes
    assert not pod.spec.init_containers
    (model_volume,) = [v for v in volumes if v.get("csi")]
    assert model_volume["csi"]["driver"] == cache_volumes.DRIVER
    assert model_volume["csi"]["volume_attributes"] == {"key": key, "access": "read"}
    # the preload Job ran in the tenant's baseline namespace without a hostPath, and was signed by the operator
    mdcc = helming.custom(stack.api).list_namespaced_custom_object(GROUP, VERSION, stack.namespace, MDCC_PLURAL)
    assert [c["status"]["readyNodes"] for c in mdcc["items"]] == [1]
    preload_pods = core.list_namespaced_pod(stack.namespace, label_selector=f"{labels.ROLE_LABEL}=preload").items
    assert preload_pods, "the preload Job's pod is gone"
    for preload in preload_pods:
        assert not [v for v in preload.spec.volumes if v.host_path], preload.spec.volumes
        assert preload.status.phase == "Succeeded"

    # the attack: another namespace names the tenant's key; the kubelet reports the driver's refusal
    core.create_namespaced_pod(stack.other, _reader_pod("thief", key, stack.image))
    # and the tenant itself may not write its cache from a pod of its own: the chart's policy refuses the pod at once
    with pytest.raises(client.ApiException) as refusal:
        core.create_namespaced_pod(stack.namespace, _reader_pod("writer", key, stack.image, cache_volumes.WRITE))
    assert refusal.value.status == 403 and "only the Job controller may create pod writer" in str(refusal.value.body)

    def refused(namespace: str, pod_name: str, words: str) -> list[str] | None:
        events = _events(core, namespace, pod_name)
        return events if any("FailedMount" in e and words in e for e in events) else None

    events = realstack.eventually(
        lambda: refused(stack.other, "thief", "has no ModelDataCacheConfig with key"),
        "a FailedMount Event for the other namespace's pod",
        timeout=180,
        explain=stack.describe,
    )
    assert any("PermissionDenied" in e or "permission" in e.lower() for e in events), events
    stuck = core.read_namespaced_pod("thief", stack.other)
    assert stuck.status.phase == "Pending", stuck.status
    assert all(s.state.running is None and s.state.terminated is None for s in stuck.status.container_statuses or [])
    core.delete_namespaced_pod("thief", stack.other, grace_period_seconds=0)

    # a namespace of the tenant's trust group shares the key: the node already holds it, and the peer's model pod
    # mounts it only after the peer's own preload Job proved its access there (AlreadyPresent: every file HEADed with
    # the peer's credentials and its fingerprints compared; nothing downloaded again)
    peer = stack.view(stack.peer)
    peer.create_endpoint(
        realstack.sim_endpoint(name, peer, model, replicas=1, weights=True, host_path=host_path, router=False)
    )
    peer_body = peer.wait_state(name, "DeploymentComplete", timeout=420)
    assert peer_body["status"]["resolved"]["weightsCacheKey"] == key  # one key for the group
    (peer_pod,) = peer.ready_pods(f"{labels.ENDPOINT_LABEL}={name},{labels.COMPONENT}=model-server", 1, timeout=300)
    peer_caches = helming.custom(stack.api).list_namespaced_custom_object(GROUP, VERSION, stack.peer, MDCC_PLURAL)
    (entry,) = [n for c in peer_caches["items"] for n in c["status"]["nodes"]]
    assert (entry["state"], entry["reason"]) == ("Ready", "AlreadyPresent"), entry
    assert _completion(peer_pod.status.pod_ip)["choices"], "no completion in the peer namespace"
    peer.remove_endpoints([name], keep_pods=set())


def _tenant_kubeconfig(stack: CsiStack, work: pathlib.Path) -> pathlib.Path:
    """A ServiceAccount of the tenant's namespace with the built-in `edit` role there (RBAC as in-cluster)."""
    core = client.CoreV1Api(stack.api)
    core.create_namespaced_service_account(stack.namespace, {"metadata": {"name": "tenant"}})
    binding = {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": stack.namespace}],
    }
    client.RbacAuthorizationV1Api(stack.api).create_namespaced_role_binding(stack.namespace, binding)
    request = {"spec": {"expirationSeconds": 3600}}
    token = core.create_namespaced_service_account_token("tenant", stack.namespace, request).status.token
    path = work / "tenant.kubeconfig"
    admin = pathlib.Path(stack.cluster.kubeconfig)
    path.write_text(yaml.safe_dump(kubeconfigs.with_token(admin, "tenant", token, stack.namespace)))
    return path


def _kubectl(kubeconfig: pathlib.Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["kubectl", "--kubeconfig", str(kubeconfig), *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)


def _mount_of(target: pathlib.Path) -> str:
    """The root (within its filesystem) of what is mounted at `target`, from the host's mountinfo."""
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(target):
            return fields[3]
    return ""


def test_a_running_writer_is_out_of_a_tenants_reach_and_reaches_only_its_keys_tree(
    csi_stack: CsiStack, tmp_path: pathlib.Path
) -> None:
    stack = csi_stack
    core = client.CoreV1Api(stack.api)
    host_path = str(stack.hostpath_root / NAME)
    shared = (stack.endpoint(NAME) or {})["status"]["resolved"]["weightsCacheKey"]
    before = {p.metadata.uid for p in core.list_namespaced_pod(stack.namespace).items}  # the tenant's serving pods

    # `late`, of the tenant's trust group, caches the same model with credentials the source refuses: no mark
    late = stack.view(stack.late)
    wrong = {"stringData": {"AWS_SECRET_ACCESS_KEY": "not-the-key"}}
    core.patch_namespaced_secret("warmstart-preload-env", stack.late, wrong)
    model = realstack.upload_model(stack.real.s3, stack.bucket, f"models/{NAME}", SIZES, seed=22)
    late.create_endpoint(
        realstack.sim_endpoint(NAME, late, model, replicas=1, weights=True, host_path=host_path, router=False)
    )

    def refused_preload() -> dict[str, Any] | None:
        caches = helming.custom(stack.api).list_namespaced_custom_object(GROUP, VERSION, stack.late, MDCC_PLURAL)
        entries = [n for c in caches["items"] for n in (c.get("status") or {}).get("nodes") or []]
        return next((n for n in entries if n.get("reason") == "AccessDenied"), None)

    realstack.eventually(refused_preload, "late's preload refused by the source", 300, stack.describe)

    node_ip = urllib.parse.urlsplit(stack.real.s3.pod_url).hostname or ""
    hanging = sourcefaults.Hanging(node_ip)
    try:
        slow = realstack.upload_model(stack.real.s3, stack.bucket, "models/csi-slow", {"config.json": 64}, seed=23)
        manifest = realstack.sim_endpoint(
            "csi-slow", stack, slow, replicas=1, weights=True, host_path=host_path, router=False
        )
        manifest["spec"]["modelSourceConfig"]["s3Storage"]["endpointUrl"] = f"http://{node_ip}:{hanging.port}"
        stack.create_endpoint(manifest)

        def running_writer() -> Any:
            pods = core.list_namespaced_pod(stack.namespace, label_selector=f"{labels.ROLE_LABEL}=preload").items
            for pod in pods:
                statuses = pod.status.container_statuses or []
                if pod.status.phase == "Running" and statuses and statuses[0].state.running is not None:
                    return pod
            return None

        writer = realstack.eventually(running_writer, "the slow preload's pod running", 300, stack.describe)
        name = writer.metadata.name
        (volume,) = [v for v in writer.spec.volumes if v.csi is not None]
        key = volume.csi.volume_attributes["key"]
        assert key != shared
        tenant = _tenant_kubeconfig(stack, tmp_path)

        # a copy of the running writer, by the tenant: refused at admission
        copied = stack.api.sanitize_for_serialization(writer)
        copied["metadata"] = {"name": "copy", "ownerReferences": copied["metadata"]["ownerReferences"]}
        copied["apiVersion"], copied["kind"] = "v1", "Pod"
        copied["spec"].pop("nodeName", None)
        copied.pop("status", None)
        done = _kubectl(tenant, "create", "-n", stack.namespace, "-f", "-", stdin=json.dumps(copied))
        assert done.returncode != 0 and "only the Job controller may create pod copy" in done.stderr, done.stderr
        # its image patched to other code, or a command run in it: refused
        patch = json.dumps([{"op": "replace", "path": "/spec/containers/0/image", "value": stack.shellless_image}])
        done = _kubectl(tenant, "patch", "pod", name, "-n", stack.namespace, "--type=json", "-p", patch)
        assert done.returncode != 0 and f"the containers of pod {name} may not change" in done.stderr, done.stderr
        done = _kubectl(tenant, "exec", name, "-n", stack.namespace, "--", "python3", "-c", "print(1)")
        assert done.returncode != 0 and "no exec or attach" in done.stderr, done.stderr
        image = core.read_namespaced_pod(name, stack.namespace).spec.containers[0].image
        assert image == writer.spec.containers[0].image

        # on the node: the writer's mount is its key's tree, and nothing else of the cache
        kubelet = stack.real.plan.nodes[0].kubelet_root
        target = kubelet / "pods" / writer.metadata.uid / "volumes" / "kubernetes.io~csi" / volume.name / "mount"
        assert _mount_of(target).endswith(f"/warmstart/keys/{key}"), _mount_of(target)
        inside = {p.name for p in target.iterdir()}
        assert not inside & {"keys", "readers", "weights", shared, "volumes"}, inside

        # all a compromised writer could write: a mark for `late`, naming the shared key's very manifest, in its tree
        cache = pathlib.Path(host_path) / "warmstart"
        manifest_file = cache / "keys" / shared / "model" / ".warmstart-manifest.json"
        forged = target / "readers" / shared
        forged.mkdir(parents=True)
        (forged / stack.late).write_text(hashlib.sha256(manifest_file.read_bytes()).hexdigest())
        assert not (cache / "readers" / shared / stack.late).exists()
        # `late` names the shared key: the driver still finds no proof of its own, and the pod gets no bytes
        core.create_namespaced_pod(stack.late, _reader_pod("borrower", shared, stack.image))
        realstack.eventually(
            lambda: [e for e in _events(core, stack.late, "borrower") if "has not proven its access" in e] or None,
            "the driver's refusal of late's pod",
            timeout=180,
            explain=stack.describe,
        )
        assert core.read_namespaced_pod("borrower", stack.late).status.phase == "Pending"
        core.delete_namespaced_pod("borrower", stack.late, grace_period_seconds=0)
    finally:
        hanging.close()
        stack.remove_endpoints(["csi-slow"], keep_pods=before)
        late.remove_endpoints([NAME], keep_pods=set())
