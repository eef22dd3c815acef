"""Running the local cluster: ``up``, ``down`` and ``status`` of one cluster directory.

A cluster directory holds everything of one cluster: ``kubeconfig`` (admin, group
system:masters), ``pki/``, ``etcd/`` (wiped on every ``up``, so each start is an empty cluster),
``logs/<component>.log``, ``stages/`` (the kwok stages in use) and ``state.json`` (PIDs,
binaries, ports), which is how ``down`` finds every process and ``up`` notices a running cluster.
With real nodes (:mod:`realnodes`) it also holds ``nodes/<name>/`` (containerd root, kubelet
root, configs), ``registry/``, ``s3/``, ``hostpath/`` and ``host-state.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import importlib.resources
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Iterator

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from warmstart.localcluster import (
    building,
    certs,
    clusterstate,
    flags,
    gatewaycrds,
    kubeconfigs,
    nodeadvertising,
    nodeplans,
    nodes,
    probing,
    processes,
    realnodes,
)
from warmstart.localcluster.clusterstate import State

logger = logging.getLogger(__name__)

#: Start order; ``down`` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: Stopped before the real nodes, so that nothing recreates or reschedules the pods being drained.
CONTROLLERS = ("kwok", "kube-scheduler", "kube-controller-manager")


class ClusterError(RuntimeError):
    """The cluster did not come up; the message names the component and its log file."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A running local cluster."""

    dir: pathlib.Path
    kubeconfig: pathlib.Path
    server: str
    real: realnodes.RealNodes | None = None
    """The real (kubelet) nodes, their registry and S3 server; None when every node is a kwok one."""

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    log: pathlib.Path


def up(
    directory: pathlib.Path,
    node_spec: str = nodes.DEFAULT_SPEC,
    timeout: float = 180.0,
    real_nodes: int = 0,
    real_node_type: str = nodeplans.DEFAULT_INSTANCE_TYPE,
) -> Cluster:
    """Start a cluster in ``directory`` (or reuse the one running there) and ensure its fake nodes.

    ``real_nodes`` > 0 adds that many real kubelet nodes of ``real_node_type`` (see :mod:`realnodes`);
    a running cluster with another number of real nodes is an error, not restarted behind your back.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with _dir_lock(directory):
        cluster = running_cluster(directory)
        if cluster is not None:
            running_real = len(cluster.real.names) if cluster.real else 0
            if running_real != real_nodes:
                raise ClusterError(
                    f"the cluster in {directory} runs {running_real} real nodes, not {real_nodes}: "
                    f"`warmstart cluster down --dir {directory}` first"
                )
            logger.info("a cluster is already running in %s (server %s)", directory, cluster.server)
            if cluster.real is not None:  # a restarted kubelet may have reset the extended resources
                with cluster.api_client() as api:
                    for name in cluster.real.names:
                        nodeadvertising.advertise(api, name, cluster.real.instance_type, timeout)
        else:
            if State.load(directory) is not None:
                down(directory)  # leftovers of a crashed or half-started cluster
            node_ip = realnodes.preflight() if real_nodes else ""
            binaries = building.ensure_binaries()
            node_binaries = building.ensure_node_binaries() if real_nodes else None
            request = State(real_nodes=real_nodes, real_node_type=real_node_type if real_nodes else "", node_ip=node_ip)
            cluster = _start(directory, binaries, node_binaries, request, time.monotonic() + timeout)
        with cluster.api_client() as api:
            try:
                nodes.wait_ready(api, nodes.create_nodes(api, node_spec), timeout)  # creates missing ones only
                gatewaycrds.install(api, timeout)  # gateway mode's InferencePool, as the chart installs it when asked
            except BaseException:
                _down_after_failure(directory)
                raise
    return cluster


def _start(
    directory: pathlib.Path,
    binaries: building.Binaries,
    node_binaries: building.NodeBinaries | None,
    state: State,
    deadline: float,
) -> Cluster:
    """Start every component in order, each once the previous one is healthy, then the real nodes that
    ``state`` asks for; stop all on failure."""
    started = time.monotonic()
    extra_ips = (state.node_ip,) if state.node_ip else ()
    pki = certs.ensure_pki(directory / "pki", service_ip=flags.SERVICE_IP, extra_ips=extra_ips)
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    wanted_ports = (*flags.PORTS, *realnodes.port_names(state.real_nodes))
    state.ports = processes.free_ports(wanted_ports)
    state.server = f"https://127.0.0.1:{state.ports['apiserver']}"
    admin = kubeconfigs.write(directory / "kubeconfig", state.server, pki, certs.ADMIN)
    stages = _copy_stages(directory / "stages")
    layout = flags.Layout(directory=directory, pki=pki, ports=state.ports, stages=stages, node_ip=state.node_ip)
    kubeconfig = {
        who: kubeconfigs.write(directory / "kubeconfigs" / f"{who.file_stem}.yaml", state.server, pki, who)
        for who in (certs.CONTROLLER_MANAGER, certs.SCHEDULER)
    }
    argvs = {
        "etcd": [str(binaries.etcd), *flags.etcd(layout)],
        "kube-apiserver": [str(binaries.kube_apiserver), *flags.apiserver(layout)],
        "kube-controller-manager": [
            str(binaries.kube_controller_manager),
            *flags.controller_manager(layout, kubeconfig[certs.CONTROLLER_MANAGER]),
        ],
        "kube-scheduler": [str(binaries.kube_scheduler), *flags.scheduler(layout, kubeconfig[certs.SCHEDULER])],
        "kwok": [str(binaries.kwok), *flags.kwok(layout, admin)],
    }
    checks = probing.health_checks(state.ports, pki)
    cluster = Cluster(dir=directory, kubeconfig=admin, server=state.server)
    try:
        for name in COMPONENTS:
            log = clusterstate.log_path(directory, name)
            state.launch(directory, name, argvs[name], env=_env(name, directory))
            healthy = functools.partial(_healthy_or_dead, name, state, checks[name], log)
            _wait(f"{name} to report healthy", deadline, healthy)
            logger.info("%s is up (pid %d)", name, state.pids[name])
        with cluster.api_client() as api:
            _wait("the default ServiceAccount in namespace default", deadline, lambda: _default_sa_exists(api))
            logger.info("control plane up in %.1f s: export KUBECONFIG=%s", time.monotonic() - started, admin)
            if node_binaries is not None:
                real = realnodes.start(state, directory, node_binaries, pki, api, deadline)
                cluster = dataclasses.replace(cluster, real=real)
                logger.info("%d real node(s) up in %.1f s in all", len(real.names), time.monotonic() - started)
    except BaseException:
        _down_after_failure(directory)
        raise
    return cluster


def _down_after_failure(directory: pathlib.Path) -> None:
    """``down`` after a failed start, reporting (not raising) what it could not undo, so the start's own
    error is the one the caller sees."""
    try:
        down(directory)
    except ClusterError as error:
        logger.error("%s", error)


def down(directory: pathlib.Path) -> list[str]:
    """Stop every process of the cluster in ``directory``; return the names of those that were running.

    With real nodes: the controllers, the scheduler and kwok stop first, then the real nodes drain and
    stop while the apiserver still answers, and the host is restored (:func:`realnodes.stop`); anything
    that could not be undone raises :class:`ClusterError` once everything else has stopped.
    """
    directory = directory.resolve()
    state = State.load(directory)
    if state is None:
        return []
    stopped: list[str] = []
    problems: list[str] = []
    if state.real_nodes:
        stopped += [name for name in CONTROLLERS if state.stop(name)]
        running_real = [name for name in realnodes.components(state.real_nodes) if state.alive(name)]
        api = _admin_client(directory) if state.alive("kube-apiserver") else None
        try:
            problems = realnodes.stop(state, directory, api)
        finally:
            if api is not None:
                api.close()
        stopped += running_real
    stopped += [name for name in reversed(COMPONENTS) if name not in stopped and state.stop(name)]
    (directory / "state.json").unlink(missing_ok=True)
    if problems:
        raise ClusterError("the real nodes left host state behind:\n  " + "\n  ".join(problems))
    return stopped


def running_cluster(directory: pathlib.Path) -> Cluster | None:
    """The cluster in ``directory`` if every component runs and the apiserver is ready, else None."""
    directory = directory.resolve()
    state = State.load(directory)
    if state is None:
        return None
    wanted = (*COMPONENTS, *realnodes.components(state.real_nodes))
    if not all(state.alive(name) for name in wanted):
        return None
    pki = certs.Pki(directory / "pki")
    if not probing.health_checks(state.ports, pki)["kube-apiserver"]():
        return None
    real = realnodes.describe(state, directory)
    return Cluster(dir=directory, kubeconfig=directory / "kubeconfig", server=state.server, real=real)


def status(directory: pathlib.Path) -> list[ComponentStatus]:
    """Process and health of each component of the cluster in ``directory``."""
    directory = directory.resolve()
    state = State.load(directory) or State()
    checks = probing.health_checks(state.ports, certs.Pki(directory / "pki")) if state.ports else {}
    result: list[ComponentStatus] = []
    for name in (*COMPONENTS, *realnodes.components(state.real_nodes)):
        pid = state.pids.get(name)
        running = state.alive(name)
        healthy = running and (checks[name]() if name in checks else True)
        result.append(ComponentStatus(name, pid, running, healthy, clusterstate.log_path(directory, name)))
    return result


def _env(name: str, directory: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    if name == "kwok":  # kwok also loads ~/.kwok/kwok.yaml if present: keep a user's stages out
        home = directory / "run" / "kwok-home"
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
    return env


def _copy_stages(target: pathlib.Path) -> list[pathlib.Path]:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    copied: list[pathlib.Path] = []
    for entry in sorted(importlib.resources.files("warmstart.localcluster").joinpath("stages").iterdir(), key=str):
        if entry.name.endswith(".yaml"):
            path = target / entry.name
            path.write_text(entry.read_text())
            copied.append(path)
    return copied


def _healthy_or_dead(name: str, state: State, check: Callable[[], bool], log: pathlib.Path) -> bool:
    if not processes.alive(state.pids[name], state.binaries[name]):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ClusterError(f"{name} exited during startup; last lines of {log}:\n{tail}")
    return check()


def _admin_client(directory: pathlib.Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(directory / "kubeconfig"))


@contextlib.contextmanager
def _dir_lock(directory: pathlib.Path) -> Iterator[None]:
    """Serialise ``up`` calls on one directory (two pytest sessions sharing ``.cluster``, say)."""
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _default_sa_exists(api: client.ApiClient) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    except ApiException as error:
        if error.status in (403, 404):
            return False
        raise
    return True


def _wait(what: str, deadline: float, condition: Callable[[], bool]) -> None:
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}")
        time.sleep(0.2)
