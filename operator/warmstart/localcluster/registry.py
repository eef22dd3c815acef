"""Running the local image registry (Debian's ``docker-registry``) and pushing OCI images into it with skopeo.

The registry listens on 127.0.0.1 over plain HTTP, with its storage under ``DIR/registry``; every
real node's containerd pulls from it (hosts.toml, see :mod:`nodeconfigs`). Its address changes with
each ``up`` (a free port), so image references are built from :attr:`RealNodesPlan.registry`.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time
from typing import Protocol

import yaml

from warmstart.localcluster import clusterstate, nodeplans, probing, serviceconfigs

COMPONENT = "registry"
BINARY = "docker-registry"


class RegistryError(RuntimeError):
    """The registry did not start, or a push failed."""


def start(state: clusterstate.State, plan: nodeplans.RealNodesPlan, timeout: float = 30.0) -> None:
    """Start the registry of ``plan`` and wait until it answers ``/v2/``."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise RegistryError(f"`{BINARY}` is not on PATH: run scripts/install-host-packages.sh")
    config = plan.registry_dir / "config.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(serviceconfigs.registry_config(plan), sort_keys=False))
    state.launch(plan.cluster_dir, COMPONENT, [binary, "serve", str(config)])
    deadline = time.monotonic() + timeout
    while not ready(plan.registry):
        if not state.alive(COMPONENT):
            raise RegistryError(f"the registry exited; see {clusterstate.log_path(plan.cluster_dir, COMPONENT)}")
        if time.monotonic() > deadline:
            raise RegistryError(f"the registry at {plan.registry} did not answer within {timeout:.0f} s")
        time.sleep(0.2)


def ready(registry: str) -> bool:
    return probing.ok(f"http://{registry}/v2/", None)


class Pushable(Protocol):
    """An image built on this machine: :class:`testimages.Layout`, or anything with the same two names."""

    @property
    def name(self) -> str:
        """``repository:tag``."""

    @property
    def source(self) -> str:
        """Where skopeo reads it, e.g. ``oci:<dir>:<tag>``."""


def push(image: Pushable, registry: str) -> str:
    """Copy ``image`` to ``registry`` (``host:port``); return the reference pods pull (``<registry>/<name>``)."""
    if shutil.which("skopeo") is None:
        raise RegistryError("`skopeo` is not on PATH: run scripts/install-host-packages.sh")
    target = f"{registry}/{image.name}"
    command = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", image.source, f"docker://{target}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RegistryError(f"pushing {image.source} to {target} failed: {done.stderr.strip()[-2000:]}")
    return target


def storage(plan: nodeplans.RealNodesPlan) -> pathlib.Path:
    return plan.registry_dir / "data"
