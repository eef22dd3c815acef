"""Starting and stopping a cluster's real nodes: registry, S3 server, containerd + kubelet per node, one kube-proxy.

``start`` runs after the control plane is healthy; ``stop`` runs while the apiserver still
answers (the controllers and the scheduler already stopped, so nothing recreates pods):

1. delete every pod on the real nodes and let the kubelets stop them (volumes unmounted, CNI DEL);
2. stop the kubelets, kube-proxy (then ``kube-proxy --cleanup``), kill what containers remain
   through containerd, stop containerd and any shim of its;
3. stop the S3 server and the registry;
4. put the host back (:mod:`hoststate`): mounts, cgroups, bridges, iptables chains, sysctls.

Only one cluster on a host may run real nodes at a time (they share iptables and kube-proxy's
chains): ``/run/warmstart/real-nodes.owner`` names the cluster directory that does.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Callable

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warmstart.localcluster import (
    building,
    certs,
    cgroups,
    clusterstate,
    hoststate,
    imaging,
    kubeconfigs,
    nodeadvertising,
    nodeconfigs,
    nodecontainers,
    nodeplans,
    objectstore,
    probing,
    pushing,
    registry,
    testimages,
)

logger = logging.getLogger(__name__)

KUBE_PROXY = "kube-proxy"
OWNER_FILE = nodeplans.RUN_ROOT / "real-nodes.owner"
#: Host programs a real node needs (from scripts/install-host-packages.sh).
HOST_PROGRAMS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "iptables",
    "ip6tables",
    "conntrack",
    "ip",
    "umount",
    "docker-registry",
    "skopeo",
    "umoci",
    "gcc",
)
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")


class RealNodeError(RuntimeError):
    """A real node could not start (or the host cannot run one); the message says why."""


@dataclasses.dataclass(frozen=True)
class RealNodes:
    """What tests and the demo need to use the real nodes of a running cluster."""

    names: tuple[str, ...]
    instance_type: str
    node_ip: str
    registry: str
    """``127.0.0.1:<port>``: push with ``skopeo copy --dest-tls-verify=false``, reference as ``<registry>/name:tag``."""
    s3: objectstore.Endpoint
    hostpath_root: pathlib.Path
    """A directory on the host for hostPath volumes (model caches); under the cluster directory."""
    plan: nodeplans.RealNodesPlan
    """Every path, port and name of the nodes (containerd sockets, kubelet roots, ...)."""

    def image(self, name: str) -> str:
        """``<registry>/<name>``, e.g. ``image("busybox:1")``."""
        return f"{self.registry}/{name}"

    def containerd_socket(self, node: str) -> pathlib.Path:
        """The containerd socket of node ``node`` (for ``ctr --address ... --namespace k8s.io``)."""
        return self.plan.nodes[self.names.index(node)].containerd_socket


def containerd_component(index: int) -> str:
    return f"containerd-{index}"


def kubelet_component(index: int) -> str:
    return f"kubelet-{index}"


def components(count: int) -> tuple[str, ...]:
    """Component names of ``count`` real nodes, in start order."""
    per_node = tuple(name for i in range(count) for name in (containerd_component(i), kubelet_component(i)))
    return (registry.COMPONENT, objectstore.COMPONENT, *per_node, KUBE_PROXY) if count else ()


def port_names(count: int) -> tuple[str, ...]:
    return (*nodeplans.SHARED_PORTS, *(name for i in range(count) for name in nodeplans.port_names(i)))


def preflight() -> str:
    """Check that this host can run a real node; return its node IP. Raises :class:`RealNodeError` with every
    reason found."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append("real nodes need root (containerd, runc, mounts, cgroups, iptables)")
    missing = [program for program in HOST_PROGRAMS if shutil.which(program) is None]
    if missing:
        problems.append(f"not on PATH: {', '.join(missing)} (run scripts/install-host-packages.sh)")
    plugins = [p for p in CNI_PLUGINS if not (nodeconfigs.CNI_BIN_DIR / p).is_file()]
    if plugins:
        problems.append(f"CNI plugins missing in {nodeconfigs.CNI_BIN_DIR}: {', '.join(plugins)}")
    mounted = {path.name for path in cgroups.hierarchies()}
    absent = [c for c in CGROUP_CONTROLLERS if c not in mounted and "unified" not in mounted]
    if absent:
        problems.append(f"cgroup controllers not mounted under /sys/fs/cgroup: {', '.join(absent)}")
    try:
        address = node_ip()
    except RealNodeError as error:
        problems.append(str(error))
        address = ""
    if problems:
        raise RealNodeError("cannot start a real node here: " + "; ".join(problems))
    return address


def node_ip() -> str:
    """The source address of the default route (the kubelet refuses a loopback node IP)."""
    done = subprocess.run(["ip", "-json", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True)
    routes = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    address = routes[0].get("prefsrc") if routes else None
    if not address:
        raise RealNodeError(f"no default route to take the node IP from ({done.stderr.strip() or 'no prefsrc'})")
    return str(address)


def plan_for(state: clusterstate.State, directory: pathlib.Path) -> nodeplans.RealNodesPlan:
    return nodeplans.plan(directory, state.real_nodes, state.node_ip, state.ports, state.real_node_type)


def describe(state: clusterstate.State, directory: pathlib.Path) -> RealNodes | None:
    """The real nodes recorded in ``state``, or None if the cluster has none."""
    if not state.real_nodes:
        return None
    plan = plan_for(state, directory)
    return RealNodes(
        names=tuple(node.name for node in plan.nodes),
        instance_type=state.real_node_type,
        node_ip=plan.node_ip,
        registry=plan.registry,
        s3=objectstore.endpoint(plan),
        hostpath_root=plan.hostpath_root,
        plan=plan,
    )


def start(
    state: clusterstate.State,
    directory: pathlib.Path,
    binaries: building.NodeBinaries,
    pki: certs.Pki,
    api: client.ApiClient,
    deadline: float,
) -> RealNodes:
    """Start the real nodes that ``state`` asks for, next to its running control plane."""
    plan = plan_for(state, directory)
    _claim_host(plan)
    snapshot_path = directory / "host-state.json"
    if hoststate.Snapshot.load(snapshot_path) is None:
        hoststate.take().save(snapshot_path)
    plan.hostpath_root.mkdir(parents=True, exist_ok=True)
    registry.start(state, plan)
    sandbox_image = pushing.push(imaging.pause_image(), plan.registry)
    registry.push(testimages.busybox(), plan.registry)
    objectstore.start(state, plan, binaries.versitygw)
    nodeadvertising.bind_nodes(api)
    for node in plan.nodes:
        _start_containerd(state, node, plan, sandbox_image, deadline)
    for node in plan.nodes:
        _start_kubelet(state, node, binaries.kubelet, pki, state.server)
    _start_kube_proxy(state, plan, binaries.kube_proxy, pki)
    for node in plan.nodes:
        component = kubelet_component(node.index)
        name = node.name
        is_ready = functools.partial(nodeadvertising.ready, api, name)
        _wait(f"node {name} to be Ready", deadline, state, directory, component, is_ready)
        nodeadvertising.advertise(api, node.name, node.instance_type, timeout=max(1.0, deadline - time.monotonic()))
        logger.info("real node %s is Ready (kubelet pid %d)", node.name, state.pids[component])
    healthz = f"http://127.0.0.1:{plan.kube_proxy_healthz_port}/healthz"
    _wait("kube-proxy to report healthy", deadline, state, directory, KUBE_PROXY, lambda: probing.ok(healthz, None))
    found = describe(state, directory)
    assert found is not None
    return found


def stop(state: clusterstate.State, directory: pathlib.Path, api: client.ApiClient | None) -> list[str]:
    """Stop every real-node process of ``state`` and restore the host; return what could not be undone."""
    problems: list[str] = []
    plan = plan_for(state, directory) if state.real_nodes else None
    if plan is None:
        return problems
    if api is not None:
        problems += _delete_pods(api, [node.name for node in plan.nodes])
    for node in plan.nodes:
        state.stop(kubelet_component(node.index))
    if state.stop(KUBE_PROXY):
        problems += _kube_proxy_cleanup(state, plan)
    for node in plan.nodes:
        if state.alive(containerd_component(node.index)):
            nodecontainers.kill_containers(node)
        state.stop(containerd_component(node.index))
        nodecontainers.kill_shims(node)
    state.stop(objectstore.COMPONENT)
    state.stop(registry.COMPONENT)
    snapshot_path = directory / "host-state.json"
    snapshot = hoststate.Snapshot.load(snapshot_path)
    if snapshot is not None:
        restore_problems = hoststate.restore(snapshot, scope(plan))
        problems += restore_problems
        if not restore_problems:
            snapshot_path.unlink()
    shutil.rmtree(plan.run_dir, ignore_errors=True)
    _release_host(plan)
    return problems


def scope(plan: nodeplans.RealNodesPlan) -> hoststate.Scope:
    """The host state that belongs to the real nodes of ``plan``."""
    return hoststate.Scope(
        directories=(plan.cluster_dir, plan.run_dir),
        cgroup_roots=tuple(node.cgroup_root for node in plan.nodes),
        bridges=tuple(node.bridge for node in plan.nodes),
        pod_logs_dirs=tuple(node.pod_logs_dir for node in plan.nodes),
    )


def _start_containerd(
    state: clusterstate.State,
    node: nodeplans.NodePlan,
    plan: nodeplans.RealNodesPlan,
    sandbox_image: str,
    deadline: float,
) -> None:
    for path in (node.containerd_root, node.cni_conf_dir, node.cni_ipam_dir, node.state_dir):
        path.mkdir(parents=True, exist_ok=True)
    hosts = node.registry_hosts_dir / plan.registry / "hosts.toml"
    hosts.parent.mkdir(parents=True, exist_ok=True)
    hosts.write_text(nodeconfigs.registry_hosts(plan.registry))
    for stale in node.cni_conf_dir.iterdir():
        stale.unlink()
    (node.cni_conf_dir / "10-warmstart.conflist").write_text(json.dumps(nodeconfigs.cni_conflist(node), indent=2))
    node.containerd_config.write_text(nodeconfigs.containerd_config(node, plan.registry, sandbox_image))
    binary = shutil.which("containerd")
    assert binary is not None  # preflight checked
    component = containerd_component(node.index)
    argv = [binary, "--config", str(node.containerd_config)]
    state.launch(plan.cluster_dir, component, argv, nodeconfigs.environment())
    answers = functools.partial(nodecontainers.answers, node)
    _wait(f"containerd of {node.name}", deadline, state, plan.cluster_dir, component, answers)


def _start_kubelet(
    state: clusterstate.State, node: nodeplans.NodePlan, binary: pathlib.Path, pki: certs.Pki, server: str
) -> None:
    identity = certs.node_identity(node.name)
    certs.ensure_client(pki, identity)
    kubeconfigs.write(node.kubelet_kubeconfig, server, pki, identity)
    node.kubelet_config.write_text(yaml.safe_dump(nodeconfigs.kubelet_config(node, pki.ca_cert), sort_keys=False))
    for path in (node.kubelet_root, node.pod_logs_dir):
        path.mkdir(parents=True, exist_ok=True)
    cgroups.create(node.cgroup_root)
    argv = [str(binary), *nodeconfigs.kubelet_args(node)]
    state.launch(node.cluster_dir, kubelet_component(node.index), argv, nodeconfigs.environment())


def _start_kube_proxy(
    state: clusterstate.State, plan: nodeplans.RealNodesPlan, binary: pathlib.Path, pki: certs.Pki
) -> None:
    certs.ensure_client(pki, certs.KUBE_PROXY)
    plan.kube_proxy_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = kubeconfigs.write(plan.kube_proxy_dir / "kubeconfig", state.server, pki, certs.KUBE_PROXY)
    config = plan.kube_proxy_dir / "config.yaml"
    config.write_text(yaml.safe_dump(nodeconfigs.kube_proxy_config(plan, kubeconfig), sort_keys=False))
    argv = [str(binary), *nodeconfigs.kube_proxy_args(config)]
    state.launch(plan.cluster_dir, KUBE_PROXY, argv, nodeconfigs.environment())


def _kube_proxy_cleanup(state: clusterstate.State, plan: nodeplans.RealNodesPlan) -> list[str]:
    log = clusterstate.log_path(plan.cluster_dir, "kube-proxy-cleanup")
    command = [state.binaries[KUBE_PROXY], *nodeconfigs.kube_proxy_cleanup_args()]
    with log.open("ab") as output:
        try:
            done = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            return [f"kube-proxy --cleanup timed out; see {log}"]
    return [] if done.returncode == 0 else [f"kube-proxy --cleanup exited {done.returncode}; see {log}"]


def _delete_pods(api: client.ApiClient, node_names: list[str], timeout: float = 60.0) -> list[str]:
    """Delete every pod bound to ``node_names`` (2 s grace) and wait until the kubelets have let them go.

    The controllers are stopped by now, so finalizers they would remove (a Job's pods carry
    ``batch.kubernetes.io/job-tracking``) are dropped here, or the pods would never go away.
    """
    core = client.CoreV1Api(api)

    def remaining() -> list[client.V1Pod]:
        found: list[client.V1Pod] = []
        for name in node_names:
            found += core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items
        return found

    left: list[client.V1Pod] = []
    try:
        for pod in remaining():
            name, namespace = pod.metadata.name, pod.metadata.namespace
            try:
                if pod.metadata.finalizers:
                    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=2)
            except ApiException as error:
                if error.status != 404:
                    raise
        deadline = time.monotonic() + timeout
        while (left := remaining()) and time.monotonic() < deadline:
            time.sleep(0.5)
    except (ApiException, OSError) as error:  # an apiserver on its way down: fall back to containerd
        return [f"could not delete the real nodes' pods through the API: {error}"]
    if left:
        names = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in left)
        logger.warning("pods still on the real nodes after %.0f s (killed through containerd): %s", timeout, names)
    return []


def _claim_host(plan: nodeplans.RealNodesPlan) -> None:
    OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    if OWNER_FILE.is_file():
        owner = pathlib.Path(OWNER_FILE.read_text().strip())
        other = clusterstate.State.load(owner) if owner != plan.cluster_dir else None
        if other is not None and any(other.alive(name) for name in components(other.real_nodes)):
            raise RealNodeError(
                f"another cluster runs real nodes on this host ({owner}); only one can at a time "
                f"(they share iptables): stop it with `warmstart cluster down --dir {owner}`"
            )
    OWNER_FILE.write_text(f"{plan.cluster_dir}\n")


def _release_host(plan: nodeplans.RealNodesPlan) -> None:
    if OWNER_FILE.is_file() and OWNER_FILE.read_text().strip() == str(plan.cluster_dir):
        OWNER_FILE.unlink()
    try:
        nodeplans.RUN_ROOT.rmdir()  # once no cluster uses it
    except OSError:
        pass


def _wait(
    what: str,
    deadline: float,
    state: clusterstate.State,
    directory: pathlib.Path,
    component: str,
    condition: Callable[[], bool],
) -> None:
    """Wait for ``condition``; fail at once, with the end of its log, if ``component`` exits meanwhile."""
    while not condition():
        exited = not state.alive(component)
        if exited or time.monotonic() > deadline:
            log = clusterstate.log_path(directory, component)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else ""
            why = f"{component} exited while waiting for {what}" if exited else f"timed out waiting for {what}"
            raise RealNodeError(f"{why}; last lines of {log}:\n{tail}")
        time.sleep(0.5)
