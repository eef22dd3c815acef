"""Where each real node of a local cluster keeps its files, sockets, cgroups and pod network: pure naming.

One plan per node, computed from the cluster directory, the node's index and the ports picked at
``up``, so ``down`` recomputes exactly what ``up`` used. Everything of one node is its own: a
containerd (root, state, socket), a kubelet root, a cgroup root, a CNI bridge and pod subnet. All
nodes share the host's network namespace, so pods on different nodes reach each other through the
host's routes between the bridges, and one kube-proxy serves them all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from collections.abc import Mapping

from warmstart.localcluster import nodes

#: The instance type a real node claims (labels, NVMe annotation, one GPU advertised).
DEFAULT_INSTANCE_TYPE = "ml.g5.xlarge"
#: Label that tells real nodes from kwok's (which carry ``type=kwok``).
REAL_NODE_LABEL = "warmstart.io/real-node"
#: Node i gets pods from 10.88.i.0/24; kwok's fake pod IPs come from 10.244.0.0/16.
POD_NETWORK = "10.88.0.0/16"
MAX_NODES = 16
#: Short enough for unix socket paths (108 bytes) whatever the cluster directory is.
RUN_ROOT = pathlib.Path("/run/warmstart")
#: Every node's cgroup root lives under this one (in every cgroup v1 hierarchy and the unified one).
CGROUP_PARENT = "/warmstart"


def port_names(index: int) -> tuple[str, ...]:
    """The ports node ``index`` needs, as keys of the cluster's port map."""
    return (f"kubelet-{index}", f"kubelet-healthz-{index}")


#: Ports that the real-node side of a cluster needs once, whatever the number of nodes.
SHARED_PORTS = ("registry", "s3", "kube-proxy-healthz", "kube-proxy-metrics")


def run_dir(cluster_dir: pathlib.Path) -> pathlib.Path:
    """The cluster's directory under /run (containerd state and sockets), keyed by its cluster directory."""
    digest = hashlib.sha256(str(cluster_dir.resolve()).encode()).hexdigest()[:10]
    return RUN_ROOT / digest


@dataclasses.dataclass(frozen=True)
class NodePlan:
    """Names, paths and ports of one real node."""

    index: int
    name: str
    instance_type: str
    node_ip: str
    cluster_dir: pathlib.Path
    kubelet_port: int
    kubelet_healthz_port: int

    @property
    def directory(self) -> pathlib.Path:
        return self.cluster_dir / "nodes" / self.name

    @property
    def containerd_root(self) -> pathlib.Path:
        return self.directory / "containerd"

    @property
    def containerd_config(self) -> pathlib.Path:
        return self.directory / "containerd.toml"

    @property
    def registry_hosts_dir(self) -> pathlib.Path:
        """containerd's ``config_path``: one ``<host:port>/hosts.toml`` per registry."""
        return self.directory / "certs.d"

    @property
    def state_dir(self) -> pathlib.Path:
        """containerd's state: sockets, task bundles, netns mounts (``netns_mounts_under_state_dir``)."""
        return run_dir(self.cluster_dir) / f"node{self.index}"

    @property
    def containerd_socket(self) -> pathlib.Path:
        return self.state_dir / "containerd.sock"

    @property
    def cni_conf_dir(self) -> pathlib.Path:
        return self.directory / "cni"

    @property
    def cni_ipam_dir(self) -> pathlib.Path:
        return self.directory / "ipam"

    @property
    def kubelet_root(self) -> pathlib.Path:
        """Under the short run dir, not the cluster dir: plugins put unix sockets under it (``plugins_registry/``,
        ``plugins/<driver>/``), and a socket path has at most 107 characters."""
        return self.state_dir / "kubelet"

    @property
    def kubelet_config(self) -> pathlib.Path:
        return self.directory / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> pathlib.Path:
        return self.directory / "kubelet.kubeconfig"

    @property
    def pod_logs_dir(self) -> pathlib.Path:
        return self.directory / "pod-logs"

    @property
    def pod_subnet(self) -> str:
        return f"10.88.{self.index}.0/24"

    @property
    def gateway(self) -> str:
        """The bridge's own address: the pods' default route."""
        return f"10.88.{self.index}.1"

    @property
    def bridge(self) -> str:
        return f"warmstart{self.index}"

    @property
    def cgroup_root(self) -> str:
        return f"{CGROUP_PARENT}/{self.name}"

    @property
    def user(self) -> str:
        """The kubelet's user name; with group ``system:nodes`` it is what the ``system:node`` role expects."""
        return f"system:node:{self.name}"


@dataclasses.dataclass(frozen=True)
class RealNodesPlan:
    """Everything the real-node side of one cluster uses."""

    cluster_dir: pathlib.Path
    node_ip: str
    nodes: tuple[NodePlan, ...]
    registry_port: int
    s3_port: int
    kube_proxy_healthz_port: int
    kube_proxy_metrics_port: int

    @property
    def registry(self) -> str:
        """``host:port`` of the local registry, as image references name it."""
        return f"127.0.0.1:{self.registry_port}"

    @property
    def registry_dir(self) -> pathlib.Path:
        return self.cluster_dir / "registry"

    @property
    def s3_dir(self) -> pathlib.Path:
        return self.cluster_dir / "s3"

    @property
    def hostpath_root(self) -> pathlib.Path:
        """Where tests and the demo point hostPath volumes (a model cache, say); removed at ``down --purge``."""
        return self.cluster_dir / "hostpath"

    @property
    def kube_proxy_dir(self) -> pathlib.Path:
        return self.cluster_dir / "kube-proxy"

    @property
    def run_dir(self) -> pathlib.Path:
        return run_dir(self.cluster_dir)


def plan(
    cluster_dir: pathlib.Path,
    count: int,
    node_ip: str,
    ports: Mapping[str, int],
    instance_type: str = DEFAULT_INSTANCE_TYPE,
) -> RealNodesPlan:
    """The plan of ``count`` real nodes; ``ports`` holds :data:`SHARED_PORTS` and each node's :func:`port_names`."""
    if not 0 < count <= MAX_NODES:
        raise ValueError(f"real nodes: between 1 and {MAX_NODES}, not {count}")
    cluster_dir = cluster_dir.resolve()
    node_plans = tuple(
        NodePlan(
            index=index,
            name=nodes.node_name(instance_type, index, prefix="real"),
            instance_type=instance_type,
            node_ip=node_ip,
            cluster_dir=cluster_dir,
            kubelet_port=ports[f"kubelet-{index}"],
            kubelet_healthz_port=ports[f"kubelet-healthz-{index}"],
        )
        for index in range(count)
    )
    return RealNodesPlan(
        cluster_dir=cluster_dir,
        node_ip=node_ip,
        nodes=node_plans,
        registry_port=ports["registry"],
        s3_port=ports["s3"],
        kube_proxy_healthz_port=ports["kube-proxy-healthz"],
        kube_proxy_metrics_port=ports["kube-proxy-metrics"],
    )
