"""Running the local control plane: ``up``, ``down`` and ``status`` of one cluster directory.

A cluster directory holds everything of one cluster: ``kubeconfig`` (admin, group
system:masters), ``pki/``, ``etcd/`` (wiped on every ``up``, so each start is an empty cluster),
``logs/<component>.log``, ``stages/`` (the kwok stages in use) and ``state.json`` (PIDs,
binaries, ports), which is how ``down`` finds every process and ``up`` notices a running cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import importlib.resources
import json
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Iterator

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from warmstart.localcluster import building, certs, flags, kubeconfigs, nodes, probing, processes

logger = logging.getLogger(__name__)

#: Start order; ``down`` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class ClusterError(RuntimeError):
    """The cluster did not come up; the message names the component and its log file."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A running local cluster."""

    dir: pathlib.Path
    kubeconfig: pathlib.Path
    server: str

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))


@dataclasses.dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    log: pathlib.Path


@dataclasses.dataclass
class State:
    """What ``state.json`` records about the processes of one ``up``."""

    server: str = ""
    ports: dict[str, int] = dataclasses.field(default_factory=dict)
    pids: dict[str, int] = dataclasses.field(default_factory=dict)
    binaries: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, directory: pathlib.Path) -> State | None:
        path = directory / "state.json"
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self, directory: pathlib.Path) -> None:
        path = directory / "state.json"
        path.with_suffix(".tmp").write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        path.with_suffix(".tmp").replace(path)


def up(directory: pathlib.Path, node_spec: str = nodes.DEFAULT_SPEC, timeout: float = 180.0) -> Cluster:
    """Start a cluster in ``directory`` (or reuse the one running there) and ensure its fake nodes."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with _dir_lock(directory):
        cluster = running_cluster(directory)
        if cluster is not None:
            logger.info("a cluster is already running in %s (server %s)", directory, cluster.server)
        else:
            if State.load(directory) is not None:
                down(directory)  # leftovers of a crashed or half-started cluster
            cluster = _start(directory, building.ensure_binaries(), time.monotonic() + timeout)
        with cluster.api_client() as api:
            try:
                nodes.wait_ready(api, nodes.create_nodes(api, node_spec), timeout)  # creates missing ones only
            except BaseException:
                down(directory)
                raise
    return cluster


def _start(directory: pathlib.Path, binaries: building.Binaries, deadline: float) -> Cluster:
    """Start every component in order, each once the previous one is healthy; stop all on failure."""
    started = time.monotonic()
    pki = certs.ensure_pki(directory / "pki", service_ip=flags.SERVICE_IP)
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    state = State(ports={name: processes.free_port() for name in flags.PORTS})
    state.server = f"https://127.0.0.1:{state.ports['apiserver']}"
    admin = kubeconfigs.write(directory / "kubeconfig", state.server, pki, certs.ADMIN)
    layout = flags.Layout(directory=directory, pki=pki, ports=state.ports, stages=_copy_stages(directory / "stages"))
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
            log = directory / "logs" / f"{name}.log"
            state.pids[name] = processes.spawn(argvs[name], log, env=_env(name, directory))
            state.binaries[name] = argvs[name][0]
            state.save(directory)
            healthy = functools.partial(_healthy_or_dead, name, state, checks[name], log)
            _wait(f"{name} to report healthy", deadline, healthy)
            logger.info("%s is up (pid %d)", name, state.pids[name])
        with cluster.api_client() as api:
            _wait("the default ServiceAccount in namespace default", deadline, lambda: _default_sa_exists(api))
    except BaseException:
        down(directory)
        raise
    logger.info("control plane up in %.1f s: export KUBECONFIG=%s", time.monotonic() - started, admin)
    return cluster


def down(directory: pathlib.Path) -> list[str]:
    """Stop every process of the cluster in ``directory``; return the names of those that were running."""
    directory = directory.resolve()
    state = State.load(directory)
    if state is None:
        return []
    stopped = [
        name
        for name in reversed(COMPONENTS)
        if name in state.pids and processes.stop(state.pids[name], state.binaries[name])
    ]
    (directory / "state.json").unlink(missing_ok=True)
    return stopped


def running_cluster(directory: pathlib.Path) -> Cluster | None:
    """The cluster in ``directory`` if every component runs and the apiserver is ready, else None."""
    directory = directory.resolve()
    state = State.load(directory)
    if state is None or set(state.pids) != set(COMPONENTS):
        return None
    if not all(processes.alive(state.pids[name], state.binaries[name]) for name in COMPONENTS):
        return None
    pki = certs.Pki(directory / "pki")
    if not probing.health_checks(state.ports, pki)["kube-apiserver"]():
        return None
    return Cluster(dir=directory, kubeconfig=directory / "kubeconfig", server=state.server)


def status(directory: pathlib.Path) -> list[ComponentStatus]:
    """Process and health of each component of the cluster in ``directory``."""
    directory = directory.resolve()
    state = State.load(directory) or State()
    checks = probing.health_checks(state.ports, certs.Pki(directory / "pki")) if state.ports else {}
    result: list[ComponentStatus] = []
    for name in COMPONENTS:
        pid = state.pids.get(name)
        running = pid is not None and processes.alive(pid, state.binaries[name])
        healthy = running and name in checks and checks[name]()
        result.append(ComponentStatus(name, pid, running, healthy, directory / "logs" / f"{name}.log"))
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
