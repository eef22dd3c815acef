"""The settings a real node needs on this kind of host, and that two nodes on one host never share state."""

from __future__ import annotations

import pathlib
import tomllib
from typing import Any

import pytest

from warmstart.csi import cli
from warmstart.localcluster import nodeconfigs, nodeplans, serviceconfigs

PORTS = {
    "registry": 5001,
    "s3": 5002,
    "kube-proxy-healthz": 5003,
    "kube-proxy-metrics": 5004,
    "kubelet-0": 6000,
    "kubelet-healthz-0": 6001,
    "kubelet-1": 6002,
    "kubelet-healthz-1": 6003,
}


@pytest.fixture
def plan(tmp_path: pathlib.Path) -> nodeplans.RealNodesPlan:
    return nodeplans.plan(tmp_path / "cluster", 2, "192.0.2.7", PORTS)


def containerd(plan: nodeplans.RealNodesPlan, index: int) -> dict[str, Any]:
    return tomllib.loads(
        nodeconfigs.containerd_config(plan.nodes[index], plan.registry, "127.0.0.1:5001/warmstart/pause:k")
    )


def test_containerd_clamps_oom_score_and_pulls_pause_from_the_local_registry(plan: nodeplans.RealNodesPlan) -> None:
    cri = containerd(plan, 0)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "127.0.0.1:5001/warmstart/pause:k"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["registry"]["config_path"] == str(plan.nodes[0].registry_hosts_dir)


def test_registry_hosts_pull_over_plain_http() -> None:
    hosts = tomllib.loads(nodeconfigs.registry_hosts("127.0.0.1:5001"))
    assert hosts["server"] == "http://127.0.0.1:5001"
    assert hosts["host"]["http://127.0.0.1:5001"]["capabilities"] == ["pull", "resolve"]


def test_two_nodes_share_no_socket_root_state_bridge_subnet_or_cgroup(plan: nodeplans.RealNodesPlan) -> None:
    first, second = (containerd(plan, i) for i in (0, 1))
    for key in ("root", "state"):
        assert first[key] != second[key]
    assert first["grpc"]["address"] != second["grpc"]["address"]
    a, b = plan.nodes
    for field in ("bridge", "pod_subnet", "cgroup_root", "kubelet_root", "state_dir"):
        assert getattr(a, field) != getattr(b, field), field
    assert len(str(a.containerd_socket)) < 100  # unix socket path limit, whatever the cluster directory


def test_a_csi_plugins_sockets_under_the_kubelet_root_fit_a_unix_socket_whatever_the_cluster_directory(
    tmp_path: pathlib.Path,
) -> None:
    deep = nodeplans.plan(tmp_path / ("d" * 120) / "cluster", 2, "192.0.2.7", PORTS)
    for node in deep.nodes:
        for socket in ("plugins_registry/warmstart-csi-reg.sock", "plugins/warmstart-csi/csi.sock"):
            assert len(f"{node.kubelet_root}/{socket}") <= cli.MAX_SOCKET_PATH, node.kubelet_root


def test_kubelet_runs_on_cgroup_v1_with_cgroupfs_and_its_own_root(plan: nodeplans.RealNodesPlan) -> None:
    node = plan.nodes[1]
    config = nodeconfigs.kubelet_config(node, pathlib.Path("/pki/ca.crt"))
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == f"/warmstart/{node.name}"
    assert config["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert (config["port"], config["healthzPort"]) == (6002, 6003)


def test_kubelet_registers_the_node_ip_and_instance_type(plan: nodeplans.RealNodesPlan) -> None:
    args = nodeconfigs.kubelet_args(plan.nodes[0])
    assert "--node-ip=192.0.2.7" in args
    assert "--hostname-override=real-ml-g5-xlarge-0" in args
    labels = next(arg for arg in args if arg.startswith("--node-labels="))
    assert "node.kubernetes.io/instance-type=ml.g5.xlarge" in labels
    assert "warmstart.io/real-node=true" in labels


def test_cni_gives_each_node_its_bridge_and_subnet(plan: nodeplans.RealNodesPlan) -> None:
    bridge = nodeconfigs.cni_conflist(plan.nodes[1])["plugins"][0]
    assert bridge["bridge"] == "warmstart1"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.88.1.0/24", "gateway": "10.88.1.1"}]]
    assert bridge["ipam"]["dataDir"].startswith(str(plan.cluster_dir))


def test_kube_proxy_masquerades_service_traffic_and_leaves_conntrack_sysctls_alone(
    plan: nodeplans.RealNodesPlan,
) -> None:
    config = nodeconfigs.kube_proxy_config(plan, pathlib.Path("/k"))
    assert config["mode"] == "iptables"
    assert config["iptables"]["masqueradeAll"] is True
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["clusterCIDR"] == nodeplans.POD_NETWORK


def test_s3_server_listens_on_loopback_and_node_ip_and_keeps_secrets_out_of_argv(
    plan: nodeplans.RealNodesPlan,
) -> None:
    argv = serviceconfigs.versitygw_args(plan)
    assert "--port=127.0.0.1:5002" in argv and "--port=192.0.2.7:5002" in argv
    assert argv[-2:] == ["posix", str(plan.s3_dir / "data")]
    env = serviceconfigs.versitygw_env(serviceconfigs.S3Credentials("AK", "SECRET"))
    assert "SECRET" not in " ".join(argv) and env["ROOT_SECRET_ACCESS_KEY"] == "SECRET"


def test_registry_stays_on_loopback(plan: nodeplans.RealNodesPlan) -> None:
    config = serviceconfigs.registry_config(plan)
    assert config["http"]["addr"] == "127.0.0.1:5001"
    assert config["storage"]["filesystem"]["rootdirectory"].startswith(str(plan.cluster_dir))


def test_plan_refuses_zero_or_too_many_nodes(tmp_path: pathlib.Path) -> None:
    for count in (0, nodeplans.MAX_NODES + 1):
        with pytest.raises(ValueError):
            nodeplans.plan(tmp_path, count, "192.0.2.7", PORTS)
