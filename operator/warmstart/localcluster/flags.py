"""Command lines of the local cluster's components (etcd, apiserver, controller-manager, scheduler, kwok).

Everything listens on 127.0.0.1 only, on ports picked free at ``up``. The flags follow what
controller-runtime's envtest and kwokctl use, plus the identities a kubeadm cluster gives
the controller-manager and the scheduler, so RBAC is exercised as in production.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence

from warmstart.localcluster import certs, nodes

#: Ports allocated at every ``up``.
PORTS = ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service; the serving cert names it
POD_CIDR = "10.244.0.0/16"  # kwok hands out pod IPs from here
NODE_IP = "10.0.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
NODE_LEASE_SECONDS = 40

#: Everything a real cluster runs that a workload or this operator can observe. Left out: volume attach/detach and
#: expansion (no storage backend), node IPAM, CSR signing and bootstrap tokens. The PV binder and the PV/PVC
#: protection controllers are in: they bind static PersistentVolumes to their claims (FSx sources), as on EKS; so is the
#: resource claim controller, which makes each pod's ResourceClaim from its ResourceClaimTemplate (DRA).
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "pod-garbage-collector-controller",
    "resourcequota-controller",
    "disruption-controller",
    "horizontal-pod-autoscaler-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "ttl-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "resourceclaim-controller",
)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one cluster's files live and which ports it uses."""

    directory: pathlib.Path
    pki: certs.Pki
    ports: Mapping[str, int]
    stages: Sequence[pathlib.Path]
    node_ip: str = ""
    """Set when real nodes run: pods reach the apiserver on this address (through the `kubernetes` Service)."""

    def url(self, port: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[port]}"


def etcd(layout: Layout) -> list[str]:
    client, peer = layout.url("etcd-client"), layout.url("etcd-peer")
    return [
        "--name=default",
        f"--data-dir={layout.directory / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync=true",  # a throwaway test store: durability buys nothing, fsync costs a lot
        f"--quota-backend-bytes={8 * 2**30}",
        "--log-level=warn",
    ]


def apiserver(layout: Layout) -> list[str]:
    pki = layout.pki
    if layout.node_ip:
        # Real nodes: the `kubernetes` Service must lead to an address pods can reach, so the apiserver
        # serves on every address (still client certs and RBAC) and advertises the node IP.
        addresses = ["--bind-address=0.0.0.0", f"--advertise-address={layout.node_ip}"]
    else:
        # 1.37 refuses a loopback advertise address for the `kubernetes` Endpoints; nothing in-cluster needs them.
        addresses = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
    return [
        f"--etcd-servers={layout.url('etcd-client')}",
        *addresses,
        f"--secure-port={layout.ports['apiserver']}",
        f"--cert-dir={layout.directory / 'run' / 'apiserver'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        # Logs, exec and port-forward on real nodes: the apiserver dials the kubelet at its InternalIP.
        f"--kubelet-client-certificate={pki.client_cert(certs.APISERVER_KUBELET_CLIENT)}",
        f"--kubelet-client-key={pki.client_key(certs.APISERVER_KUBELET_CLIENT)}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # The delegated authn of the controller-manager and scheduler expects a request-header CA;
        # no front-proxy cert is ever issued, so the allowed name admits nobody.
        f"--requestheader-client-ca-file={pki.ca_cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    ]


def controller_manager(layout: Layout, kubeconfig: pathlib.Path) -> list[str]:
    pki = layout.pki
    return [
        *_delegating_clients(kubeconfig),
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports['controller-manager']}",
        f"--cert-dir={layout.directory / 'run' / 'controller-manager'}",
        "--leader-elect=false",
        # The default 20/30 throttles a 500-node benchmark (e.g. untainting new nodes) for a minute.
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        f"--controllers={','.join(CONTROLLERS)}",
        "--use-service-account-credentials=true",  # each controller acts as its own SA, as in kubeadm
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler(layout: Layout, kubeconfig: pathlib.Path) -> list[str]:
    return [
        *_delegating_clients(kubeconfig),
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports['scheduler']}",
        f"--cert-dir={layout.directory / 'run' / 'scheduler'}",
        "--leader-elect=false",
    ]


def kwok(layout: Layout, kubeconfig: pathlib.Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}=fake",
        f"--cidr={POD_CIDR}",
        f"--node-ip={NODE_IP}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        f"--server-address=127.0.0.1:{layout.ports['kwok']}",
        "--v=WARN",  # INFO logs every lease renewal: ~50 lines/s with 500 nodes
        *(f"--config={stage}" for stage in layout.stages),
    ]


def _delegating_clients(kubeconfig: pathlib.Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]
