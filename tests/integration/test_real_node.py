"""A real kubelet node: it joins as a HyperPod-like node, runs pods from the local registry, gives them a
network that reaches the apiserver, each other and the S3 server, and ``down`` leaves the host as it was.

The module starts its own real-node cluster (stopping the session's one first, since a host runs one at a
time) and its last test stops it and compares the host with what it was before the start.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import pathlib
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

import kube
from warmstart.localcluster import hoststate, nodeplans, nodes, running, versions

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

T = TypeVar("T")
TIMEOUT = 120.0


@dataclasses.dataclass(frozen=True)
class HostView:
    """The host state that a real node touches, read straight from the kernel and the tools."""

    mounts: frozenset[str]
    cgroups: frozenset[str]
    chains: frozenset[str]
    links: frozenset[str]
    sysctls: dict[str, str]


def host_view(cluster_dirs: tuple[pathlib.Path, ...]) -> HostView:
    prefixes = (*(str(d) for d in cluster_dirs), str(nodeplans.RUN_ROOT), "/run/netns")
    mountpoints = [line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()]
    cgroup_dirs = {
        str(path)
        for top in pathlib.Path("/sys/fs/cgroup").iterdir()
        for path in (top / "kubepods", top / "warmstart")
        if path.exists()
    }
    chains = set()
    for family in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listing = subprocess.run([family, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
            chains |= {f"{family}/{table}/{line.split()[1]}" for line in listing.splitlines() if line.startswith("-N ")}
    links = {path.name for path in pathlib.Path("/sys/class/net").iterdir()}
    sysctls = {name: value for name in hoststate.SYSCTLS if (value := _sysctl(name)) is not None}
    return HostView(
        mounts=frozenset(point for point in mountpoints if point.startswith(prefixes)),
        cgroups=frozenset(cgroup_dirs),
        chains=frozenset(chains),
        links=frozenset(name for name in links if name.startswith(("veth", "warmstart"))),
        sysctls=sysctls,
    )


def _sysctl(name: str) -> str | None:
    try:
        return (pathlib.Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


@dataclasses.dataclass
class Started:
    cluster: running.Cluster
    api: client.ApiClient
    before: HostView
    stop: Callable[[], None]

    @property
    def node(self) -> str:
        assert self.cluster.real is not None
        return self.cluster.real.names[0]


@pytest.fixture(scope="module")
def started(real_clusters: Any) -> Iterator[Started]:
    if real_clusters.reused is not None:
        pytest.fail("WARMSTART_REAL_KUBECONFIG is set: this module must start and stop its own real node")
    real_clusters.stop()  # the host runs one real-node cluster at a time
    before = host_view(())
    cluster = real_clusters.get()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield Started(cluster, api, before, real_clusters.stop)
    finally:
        api.close()


@pytest.fixture
def ns(started: Started) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(started.api)
    core.create_namespace({"metadata": {"name": name}})
    eventually(lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items, "SA")
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def eventually(probe: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
    """Poll ``probe`` until it returns something truthy (``kube.wait_for``, with this module's timeout)."""
    return kube.wait_for(probe, timeout=timeout, interval=0.5, what=what)


def job(name: str, node: str, image: str, script: str, **pod: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "main", "image": image, "command": ["/bin/sh", "-c", script]}],
                    **pod,
                }
            },
        },
    }


def finished_pod(api: client.ApiClient, namespace: str, job_name: str) -> Any:
    core = client.CoreV1Api(api)

    def done() -> Any:
        for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items:
            if pod.status.phase in ("Succeeded", "Failed"):
                return pod
        return None

    pod = eventually(done, f"job {job_name} to finish")
    if pod.status.phase != "Succeeded":
        log = core.read_namespaced_pod_log(pod.metadata.name, namespace)
        pytest.fail(f"job {job_name} failed: {pod.status.container_statuses}\n{log}")
    return pod


def termination_message(pod: Any) -> str:
    return str(pod.status.container_statuses[0].state.terminated.message or "")


def test_real_node_is_ready_with_a_hyperpod_shape_and_not_kwoks(started: Started) -> None:
    node = client.CoreV1Api(started.api).read_node(started.node)
    labels, annotations = node.metadata.labels, node.metadata.annotations or {}
    assert labels[nodes.INSTANCE_TYPE_LABEL] == "ml.g5.xlarge"
    assert labels[nodeplans.REAL_NODE_LABEL] == "true"
    assert labels.get("type") != "kwok" and nodes.KWOK_ANNOTATION not in annotations
    assert annotations[nodes.NVME_ANNOTATION] == str(nodes.INSTANCE_TYPES["ml.g5.xlarge"].nvme_bytes)
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    assert node.status.node_info.kubelet_version == versions.KUBERNETES
    assert node.status.node_info.container_runtime_version.startswith("containerd://1.6.")
    internal = [a.address for a in node.status.addresses if a.type == "InternalIP"]
    assert internal == [started.cluster.real.node_ip if started.cluster.real else ""]


#: In-cluster config as client libraries do it: KUBERNETES_SERVICE_HOST/PORT (the `kubernetes` ClusterIP), the
#: service account's CA (so the serving cert must name 10.96.0.1) and token; asks the apiserver who it is.
WHO_AM_I = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
url = f"https://{host}:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews"
body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
headers = {"Authorization": "Bearer " + open(sa + "/token").read(), "Content-Type": "application/json"}
request = urllib.request.Request(url, data=body, method="POST", headers=headers)
with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=sa + "/ca.crt"), timeout=10) as answer:
    user = json.load(answer)["status"]["userInfo"]["username"]
open("/data/out.txt", "w").write("written-by-the-container\\n")
open("/dev/termination-log", "w").write(user)
"""


def test_pod_runs_from_the_local_registry_writes_a_hostpath_and_calls_the_api_as_its_service_account(
    started: Started, ns: str
) -> None:
    """busybox's TLS cannot talk to Go's, so the pod runs the host's python3 (/usr mounted read-only)."""
    real = started.cluster.real
    assert real is not None
    target = real.hostpath_root / ns
    volumes = [("data", str(target), "/data", False), ("usr", "/usr", "/usr", True)]
    volumes += [("lib", "/usr/lib", "/lib", True), ("lib64", "/usr/lib64", "/lib64", True)]
    body = job(
        "api",
        started.node,
        real.image("busybox:1"),
        'exec /usr/bin/python3 -c "$CODE"',
        volumes=[{"name": n, "hostPath": {"path": path, "type": "DirectoryOrCreate"}} for n, path, _, _ in volumes],
    )
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "CODE", "value": WHO_AM_I}]
    container["volumeMounts"] = [{"name": n, "mountPath": m, "readOnly": ro} for n, _, m, ro in volumes]
    client.BatchV1Api(started.api).create_namespaced_job(ns, body)
    pod = finished_pod(started.api, ns, "api")
    assert termination_message(pod) == f"system:serviceaccount:{ns}:default"
    assert (target / "out.txt").read_text() == "written-by-the-container\n"
    assert pod.status.container_statuses[0].container_id.startswith("containerd://")
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(nodeplans.POD_NETWORK)


def test_pods_reach_each_other_directly_and_through_a_service_and_reach_the_s3_server(
    started: Started, ns: str
) -> None:
    real = started.cluster.real
    assert real is not None
    core = client.CoreV1Api(started.api)
    labels = {"app": "web"}
    server = {
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": started.node},
            "containers": [
                {
                    "name": "httpd",
                    "image": real.image("busybox:1"),
                    "command": [
                        "/bin/sh",
                        "-c",
                        "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www",
                    ],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }
    core.create_namespaced_pod(ns, server)
    service = {"metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}}
    cluster_ip = core.create_namespaced_service(ns, service).spec.cluster_ip

    def ready_ip() -> str | None:
        pod = core.read_namespaced_pod("web", ns)
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return str(pod.status.pod_ip) if ready else None

    pod_ip = eventually(ready_ip, "the web pod to be Ready")
    script = (
        "set -e; "
        f"direct=$(wget -q -O- http://{pod_ip}:8080/index.html); "
        # kube-proxy programs the Service a moment after the endpoint turns ready
        f"for i in $(seq 1 30); do service=$(timeout 3 wget -q -O- http://{cluster_ip}/index.html) && break; "
        "sleep 1; done; "
        f"s3=$(wget -S -O /dev/null {real.s3.pod_url}/health 2>&1 | grep HTTP/ | head -1); "
        'printf "%s|%s|%s" "$direct" "$service" "$s3" > /dev/termination-log'
    )
    body = job("client", started.node, real.image("busybox:1"), script)
    client.BatchV1Api(started.api).create_namespaced_job(ns, body)
    direct, through_service, s3 = termination_message(finished_pod(started.api, ns, "client")).split("|")
    assert direct == "hello-from-web"
    assert through_service == "hello-from-web"
    assert "200" in s3


def test_s3_server_takes_buckets_and_objects_from_the_host(started: Started) -> None:
    from warmstart.localcluster import objectstore

    real = started.cluster.real
    assert real is not None
    objectstore.create_bucket(real.s3, "models")
    s3 = real.s3.client()
    s3.put_object(Bucket="models", Key="m/config.json", Body=json.dumps({"ok": True}).encode())
    assert json.loads(s3.get_object(Bucket="models", Key="m/config.json")["Body"].read()) == {"ok": True}


def test_down_restores_the_host(started: Started) -> None:
    real = started.cluster.real
    assert real is not None
    during = host_view((started.cluster.dir,))
    assert during.mounts and during.cgroups, "the real node mounted and created cgroups (else nothing is checked)"
    assert any("/KUBE-" in chain for chain in during.chains - started.before.chains)
    started.stop()
    after = host_view((started.cluster.dir,))
    # what this cluster mounted (an earlier cluster killed before its `down` may have left its own)
    assert sorted(after.mounts - started.before.mounts) == [], "mounts left under the cluster or containerd state dirs"
    assert sorted(after.cgroups - started.before.cgroups) == [], "kubepods/warmstart cgroups left"
    assert sorted(after.chains - started.before.chains) == [], "iptables chains left"
    assert sorted(after.links - started.before.links) == [], "network interfaces left"
    assert after.sysctls == started.before.sysctls
