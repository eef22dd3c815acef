"""Config files and command lines of a real node's containerd, CNI, kubelet and kube-proxy: pure rendering.

The settings this kind of machine needs, each for a reason found by running it:

- containerd ``restrict_oom_score_adj = true``: root here lacks CAP_SYS_RESOURCE, so runc cannot
  lower a sandbox's oom_score_adj to -998 and every sandbox fails ("can't get final child's PID
  from pipe: EOF") unless containerd clamps the value to its own;
- containerd pulls the sandbox (pause) image from the local registry over plain HTTP
  (``config_path`` + hosts.toml); no public registry is needed;
- kubelet ``failCgroupV1: false`` (1.35+ refuses cgroup v1 hosts otherwise) and ``cgroupDriver:
  cgroupfs`` (no systemd; containerd 1.6 lacks the RuntimeConfig call, so kubelet 1.37 falls back
  to this setting, a fallback that 1.38 removes);
- the node IP is the default-route source address: the kubelet refuses a loopback one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

from warmstart.localcluster import nodeplans, tomlwriting

#: Debian's containernetworking-plugins install here.
CNI_BIN_DIR = pathlib.Path("/usr/lib/cni")
#: Plugins of containerd 1.6 that a node never uses; disabling them keeps their warnings out of the log.
DISABLED_CONTAINERD_PLUGINS = (
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
)


def containerd_config(node: nodeplans.NodePlan, registry: str, sandbox_image: str) -> str:
    """containerd's config.toml for ``node``: own root, state and socket; CRI with the settings above.

    ``sandbox_image`` is the pause image as pushed to ``registry`` (``imaging.pause_image()``)."""
    runc_options: dict[str, tomlwriting.Value] = {
        "SystemdCgroup": False,
        "Root": str(node.state_dir / "runc"),  # runc's own state; the default /run/containerd/runc is shared
    }
    cri: dict[str, tomlwriting.Value] = {
        "sandbox_image": sandbox_image,
        "restrict_oom_score_adj": True,
        "netns_mounts_under_state_dir": True,  # pod netns under the state dir, not /run/netns
        "enable_selinux": False,
        "containerd": {
            "snapshotter": "overlayfs",
            "default_runtime_name": "runc",
            "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2", "options": runc_options}},
        },
        "cni": {"bin_dir": str(CNI_BIN_DIR), "conf_dir": str(node.cni_conf_dir), "max_conf_num": 1},
        "registry": {"config_path": str(node.registry_hosts_dir)},
    }
    document: dict[str, tomlwriting.Value] = {
        "version": 2,
        "root": str(node.containerd_root),
        "state": str(node.state_dir),
        "disabled_plugins": list(DISABLED_CONTAINERD_PLUGINS),
        "grpc": {"address": str(node.containerd_socket)},
        "plugins": {
            "io.containerd.grpc.v1.cri": cri,
            "io.containerd.internal.v1.opt": {"path": str(node.containerd_root / "opt")},
        },
    }
    return tomlwriting.dumps(document)


def registry_hosts(registry: str) -> str:
    """hosts.toml that makes containerd pull ``registry`` (``host:port``) over plain HTTP."""
    url = f"http://{registry}"
    return tomlwriting.dumps({"server": url, "host": {url: {"capabilities": ["pull", "resolve"]}}})


def cni_conflist(node: nodeplans.NodePlan) -> dict[str, Any]:
    """A bridge network with host-local addresses: pods of ``node`` get IPs from its subnet."""
    return {
        "cniVersion": "1.0.0",
        "name": f"warmstart-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,  # the bridge holds the gateway address; the host routes between bridges
                "ipMasq": False,  # pods reach the node IP and each other; nothing outside the host
                "hairpinMode": True,  # a pod reaching itself through a Service
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.cni_ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(node: nodeplans.NodePlan, client_ca: pathlib.Path) -> dict[str, Any]:
    """The KubeletConfiguration of ``node``."""
    socket = f"unix://{node.containerd_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": socket,
        "imageServiceEndpoint": socket,
        "address": node.node_ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.kubelet_healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "podLogsDir": str(node.pod_logs_dir),
        "failSwapOn": False,
        "serializeImagePulls": False,
        "registerNode": True,
        "maxPods": 110,
        # A shared development disk: evict only when it is really full, never garbage-collect images early.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "containerLogMaxSize": "10Mi",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
    }


def node_labels(node: nodeplans.NodePlan) -> dict[str, str]:
    """Labels the kubelet registers its node with (instance type as on HyperPod)."""
    return {
        "node.kubernetes.io/instance-type": node.instance_type,
        nodeplans.REAL_NODE_LABEL: "true",
    }


def kubelet_args(node: nodeplans.NodePlan) -> list[str]:
    """The kubelet's flags beyond its config file."""
    labels = ",".join(f"{key}={value}" for key, value in sorted(node_labels(node).items()))
    return [
        f"--config={node.kubelet_config}",
        f"--kubeconfig={node.kubelet_kubeconfig}",
        f"--root-dir={node.kubelet_root}",
        f"--cert-dir={node.kubelet_root / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.node_ip}",
        f"--node-labels={labels}",
        "--v=2",
    ]


def kube_proxy_config(plan: nodeplans.RealNodesPlan, kubeconfig: pathlib.Path) -> dict[str, Any]:
    """The KubeProxyConfiguration of the host's one kube-proxy (iptables mode), touching as little host state
    as it can: no conntrack sysctls, no localhost NodePorts (which would set route_localnet)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": plan.nodes[0].name,
        "bindAddress": plan.node_ip,
        "healthzBindAddress": f"127.0.0.1:{plan.kube_proxy_healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{plan.kube_proxy_metrics_port}",
        "clusterCIDR": nodeplans.POD_NETWORK,
        "nodePortAddresses": [f"{plan.node_ip}/32"],
        # Service traffic is SNATed, so a reply from a pod on the same bridge comes back through the host.
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "1s"},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def kube_proxy_args(config_path: pathlib.Path) -> list[str]:
    return [f"--config={config_path}", "--v=2"]


def kube_proxy_cleanup_args() -> list[str]:
    """``kube-proxy --cleanup``: remove every rule and chain kube-proxy programs, then exit."""
    return ["--cleanup", "--v=2"]


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean, explicit environment for node daemons: a PATH with sbin (iptables, runc, mount), nothing else."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    env.update(extra or {})
    return env
