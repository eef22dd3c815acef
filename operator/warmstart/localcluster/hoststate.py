"""The host state that real nodes change, saved before they start and put back when they stop.

Saved in ``DIR/host-state.json`` before the first kubelet starts:

- sysctls the kubelet sets (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...),
  the bridge plugin sets (net.ipv4.ip_forward=1) or kube-proxy may set;
- the iptables chains present (IPv4 and IPv6; filter, nat, mangle), so that ``down`` removes the
  KUBE-* and CNI-* chains that appeared since, and no other;
- whether /var/log/containers and /run/containerd existed (the kubelet and the containerd shims
  create them).

Restoring also unmounts everything under the cluster and state directories, removes the cgroup
trees and the CNI bridges; see :func:`restore`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
from collections.abc import Iterable, Sequence

from warmstart.localcluster import cgroups, iptables, mounts

SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
#: Chains with these prefixes that were not there before belong to the nodes (kubelet, kube-proxy, CNI).
OWNED_CHAIN_PREFIXES = ("KUBE-", "CNI-")
CONTAINER_LOGS = pathlib.Path("/var/log/containers")
#: containerd 1.6 puts shim sockets in /run/containerd/s whatever its own state dir is.
SHIM_SOCKETS = pathlib.Path("/run/containerd/s")
#: ``ctr tasks exec`` (handy to look into a node's containers) keeps its fifos here.
CTR_FIFOS = pathlib.Path("/run/containerd/fifo")
#: Directories that the nodes may create; removed again (when empty) unless they existed before.
CREATED_DIRS = (CONTAINER_LOGS, SHIM_SOCKETS, CTR_FIFOS, SHIM_SOCKETS.parent)


@dataclasses.dataclass
class Snapshot:
    sysctls: dict[str, str]
    chains: dict[str, list[str]]
    """``"<family>/<table>"`` -> user-defined chains."""
    existed: list[str]
    """Which of :data:`CREATED_DIRS` existed."""

    def save(self, path: pathlib.Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: pathlib.Path) -> Snapshot | None:
        return cls(**json.loads(path.read_text())) if path.is_file() else None


@dataclasses.dataclass(frozen=True)
class Scope:
    """What of the host belongs to one cluster's real nodes."""

    directories: tuple[pathlib.Path, ...]
    """Everything mounted below these goes (cluster dir, containerd state dirs)."""
    cgroup_roots: tuple[str, ...]
    bridges: tuple[str, ...]
    pod_logs_dirs: tuple[pathlib.Path, ...]
    """/var/log/containers links that point below these go."""


def read_sysctl(name: str) -> str | None:
    try:
        return _sysctl_path(name).read_text().strip()
    except OSError:
        return None


def take() -> Snapshot:
    sysctls = {name: value for name in SYSCTLS if (value := read_sysctl(name)) is not None}
    chains = {
        f"{family}/{table}": list(iptables.chains(family, table))
        for family in iptables.FAMILIES
        if iptables.available(family)
        for table in iptables.TABLES
    }
    existed = [str(path) for path in CREATED_DIRS if path.exists()]
    return Snapshot(sysctls=sysctls, chains=chains, existed=existed)


def new_chains(before: Snapshot, after: Snapshot) -> dict[str, list[str]]:
    """Chains with an owned prefix present in ``after`` but not in ``before``, per ``family/table``."""
    found: dict[str, list[str]] = {}
    for key, chains in after.chains.items():
        old = set(before.chains.get(key, []))
        fresh = [chain for chain in chains if chain not in old and chain.startswith(OWNED_CHAIN_PREFIXES)]
        if fresh:
            found[key] = fresh
    return found


def changed_sysctls(before: Snapshot, after: Snapshot) -> dict[str, tuple[str, str]]:
    """Sysctls whose value differs: name -> (before, after)."""
    return {
        name: (value, after.sysctls[name])
        for name, value in before.sysctls.items()
        if name in after.sysctls and after.sysctls[name] != value
    }


def restore(before: Snapshot, scope: Scope) -> list[str]:
    """Put the host back as ``before`` found it, within ``scope``; return what could not be undone.

    Call it once every process of the nodes has stopped: mounts first (a mount pins nothing in
    a cgroup, but a live container would re-create state), then cgroups, bridges, chains, sysctls.
    """
    problems: list[str] = []
    problems += [f"still mounted: {point}" for point in mounts.unmount_under(scope.directories)]
    for root in scope.cgroup_roots:
        problems += [f"cgroup not removed: {path}" for path in cgroups.remove(root)]
    for bridge in scope.bridges:
        if pathlib.Path("/sys/class/net", bridge).exists():
            done = subprocess.run(["ip", "link", "delete", bridge], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                problems.append(f"bridge {bridge}: {done.stderr.strip()}")
    for key, chains in new_chains(before, take()).items():
        family, table = key.split("/")
        problems += iptables.remove_chains(family, table, chains)
    for name, value in before.sysctls.items():
        if read_sysctl(name) != value:
            try:
                _sysctl_path(name).write_text(value + "\n")
            except OSError as error:
                problems.append(f"sysctl {name}={value}: {error}")
    _remove_log_links(scope.pod_logs_dirs)
    for path in CREATED_DIRS:
        if str(path) not in before.existed:
            _remove_if_empty(path)
    return problems


def leftovers(before: Snapshot, scope: Scope) -> list[str]:
    """What of ``scope`` is still on the host compared with ``before`` (empty when restored)."""
    now = take()
    found = [f"mounted: {point}" for point in mounts.under(scope.directories)]
    for root in scope.cgroup_roots:
        found += [f"cgroup: {h / root.strip('/')}" for h in cgroups.hierarchies() if (h / root.strip("/")).exists()]
    found += [f"bridge: {bridge}" for bridge in scope.bridges if pathlib.Path("/sys/class/net", bridge).exists()]
    found += [f"iptables {key}: {', '.join(chains)}" for key, chains in new_chains(before, now).items()]
    found += [f"sysctl {name}: {old} -> {new}" for name, (old, new) in changed_sysctls(before, now).items()]
    return found


def _sysctl_path(name: str) -> pathlib.Path:
    return pathlib.Path("/proc/sys") / name.replace(".", "/")


def _remove_log_links(targets: Sequence[pathlib.Path]) -> None:
    if not CONTAINER_LOGS.is_dir():
        return
    for link in CONTAINER_LOGS.iterdir():
        if link.is_symlink() and _points_below(os.readlink(link), targets):
            link.unlink(missing_ok=True)


def _points_below(target: str, roots: Iterable[pathlib.Path]) -> bool:
    path = pathlib.Path(target)
    return any(path == root or root in path.parents for root in roots)


def _remove_if_empty(path: pathlib.Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
