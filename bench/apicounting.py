"""What the API server and the host see of one process during a bench: its requests, counted by the API server, and
the CPU seconds of the operator and of every control-plane component.

The operator runs as a ServiceAccount of the bench's namespace, and a FlowSchema of its own (API Priority and
Fairness) matches exactly that ServiceAccount, so `apiserver_flowcontrol_dispatched_requests_total` for that schema
counts every request the operator made: its controllers' reads and writes, and kopf's watches, progress annotations,
peering and Events alike. The schema sends them to the `workload-low` priority level, where the API server's default
`service-accounts` schema sends a pod's ServiceAccount, so the operator is served as in a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client

from warmstart.localcluster import kubeconfigs
from warmstart.localcluster.clusterstate import State

#: the control plane's processes, as the local cluster names them
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SERVICE_ACCOUNT = "operator"
PRIORITY_LEVEL = "workload-low"


def flow_schema_name(namespace: str) -> str:
    return f"bench-{namespace}"


def operator_identity(api: client.ApiClient, admin: Path, namespace: str, out: Path) -> Path:
    """A ServiceAccount (cluster-admin: the bench measures load, not RBAC), a FlowSchema that matches it alone, and a
    kubeconfig that authenticates as it (TokenRequest)."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": SERVICE_ACCOUNT}})
    name = flow_schema_name(namespace)
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
        }
    )
    client.FlowcontrolApiserverV1Api(api).create_flow_schema(
        {
            "metadata": {"name": name},
            "spec": {
                "matchingPrecedence": 900,
                "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {"name": SERVICE_ACCOUNT, "namespace": namespace},
                            }
                        ],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "clusterScope": True,
                                "namespaces": ["*"],
                            }
                        ],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        }
    )
    token = core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, namespace, {"spec": {"expirationSeconds": 7200}}
    ).status.token
    out.write_text(yaml.safe_dump(kubeconfigs.with_token(admin, SERVICE_ACCOUNT, token)))
    return out


def drop_identity(api: client.ApiClient, namespace: str) -> None:
    name = flow_schema_name(namespace)
    for call in (
        lambda: client.FlowcontrolApiserverV1Api(api).delete_flow_schema(name),
        lambda: client.RbacAuthorizationV1Api(api).delete_cluster_role_binding(name),
    ):
        try:
            call()
        except client.ApiException:
            pass


@dataclass(frozen=True)
class ServerCounts:
    """The API server's counters for one FlowSchema."""

    dispatched: float
    rejected: float
    wait_seconds_sum: float
    wait_count: float

    def minus(self, before: ServerCounts) -> ServerCounts:
        return ServerCounts(
            self.dispatched - before.dispatched,
            self.rejected - before.rejected,
            self.wait_seconds_sum - before.wait_seconds_sum,
            self.wait_count - before.wait_count,
        )


def _sum(text: str, metric: str, schema: str, extra: str = "") -> float:
    total = 0.0
    pattern = re.compile(rf"^{metric}\{{([^}}]*)\}} (\S+)$", re.MULTILINE)
    for labels, value in pattern.findall(text):
        if f'flow_schema="{schema}"' in labels and extra in labels:
            total += float(value)
    return total


def server_counts(api: client.ApiClient, namespace: str) -> ServerCounts:
    """The API server's request counters of the operator's FlowSchema, from its /metrics (admin credentials)."""
    response = api.call_api(
        "/metrics", "GET", _preload_content=False, _return_http_data_only=True, auth_settings=["BearerToken"]
    )
    text = response.data.decode()
    schema = flow_schema_name(namespace)
    return ServerCounts(
        dispatched=_sum(text, "apiserver_flowcontrol_dispatched_requests_total", schema),
        rejected=_sum(text, "apiserver_flowcontrol_rejected_requests_total", schema),
        wait_seconds_sum=_sum(text, "apiserver_flowcontrol_request_wait_duration_seconds_sum", schema),
        wait_count=_sum(text, "apiserver_flowcontrol_request_wait_duration_seconds_count", schema),
    )


def component_pids(kubeconfig: str) -> dict[str, int]:
    """The control plane's process ids, when the cluster is the local one whose directory holds `kubeconfig`."""
    state = State.load(Path(kubeconfig).resolve().parent)
    if state is None:
        return {}
    return {name: pid for name, pid in state.pids.items() if name in COMPONENTS and psutil.pid_exists(pid)}


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process so far (from /proc, through psutil)."""
    found: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        found[name] = times.user + times.system
    return found


def cpu_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its children (the operator has none; the bench's own figure includes kubectl)."""
    process = psutil.Process(pid)
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def uptime() -> str:
    """The `uptime` line (load averages), printed next to every figure."""
    import subprocess

    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


Json = dict[str, Any]
