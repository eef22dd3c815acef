"""Running one command in a locally built image with runc, the way the real node's container runtime runs a pod.

The image's own config decides the process: its ENTRYPOINT (unless ``entrypoint`` replaces it, like a pod's
``command``), its CMD (unless ``args`` replace it, like a pod's ``args``), its USER, Env and WorkingDir. The
container gets what the chart's pods get: a read-only root filesystem, ``/tmp`` as a fresh tmpfs, no capabilities,
no new privileges, and its own network namespace (so no network). The root filesystem is the image mounted from
the buildah store, so nothing is copied or unpacked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any

from warmstart.localcluster import imagestore, stepping

#: like the chart's ``tmp`` emptyDir (sizeLimit 64Mi)
TMP_SIZE = "64m"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the container's process ended."""

    code: int
    stdout: str
    stderr: str


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config that decide how its container's process starts."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str
    env: tuple[str, ...]
    working_dir: str


def image_config(store: imagestore.Store, reference: str) -> ImageConfig:
    inspected = json.loads(stepping.output([*store.buildah(), "inspect", "--type", "image", reference]))
    config: dict[str, Any] = inspected["OCIv1"].get("config") or {}
    return ImageConfig(
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        user=config.get("User") or "0:0",
        env=tuple(config.get("Env") or ()),
        working_dir=config.get("WorkingDir") or "/",
    )


def process_args(config: ImageConfig, entrypoint: Sequence[str] | None, args: Sequence[str] | None) -> list[str]:
    """Kubernetes' rule: ``command`` replaces ENTRYPOINT and drops CMD; ``args`` replace CMD."""
    if entrypoint is not None:
        return [*entrypoint, *(args or ())]
    return [*config.entrypoint, *(config.cmd if args is None else args)]


def numeric_user(user: str) -> tuple[int, int]:
    """``uid[:gid]`` as numbers; a user name would need the image's /etc/passwd, which a pod cannot rely on."""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise stepping.StepError(f"image USER {user!r} is not numeric (uid[:gid])")
    return int(uid), int(gid or uid)


def runtime_spec(template: dict[str, Any], config: ImageConfig, argv: list[str], rootfs: str) -> dict[str, Any]:
    """``runc spec``'s default, turned into the container a pod of the chart would get."""
    spec: dict[str, Any] = json.loads(json.dumps(template))
    uid, gid = numeric_user(config.user)
    env = list(config.env)
    if not any(entry.startswith("PATH=") for entry in env):
        env.insert(0, DEFAULT_PATH)
    spec["process"].update(
        terminal=False,
        args=argv,
        env=env,
        cwd=config.working_dir,
        user={"uid": uid, "gid": gid},
        noNewPrivileges=True,
        capabilities={kind: [] for kind in ("bounding", "effective", "inheritable", "permitted", "ambient")},
    )
    spec["root"] = {"path": rootfs, "readonly": True}
    spec["hostname"] = "warmstart-check"
    spec["mounts"] = [mount for mount in spec["mounts"] if mount["destination"] != "/tmp"] + [
        {
            "destination": "/tmp",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", f"size={TMP_SIZE}"],
        }
    ]
    return spec


def run(
    store: imagestore.Store,
    reference: str,
    args: Sequence[str] | None = None,
    entrypoint: Sequence[str] | None = None,
    timeout: float = 300.0,
) -> Outcome:
    """Run ``reference`` (an image in ``store``) to completion and return how it ended."""
    config = image_config(store, reference)
    argv = process_args(config, entrypoint, args)
    if not argv:
        raise stepping.StepError(f"{reference} has neither ENTRYPOINT nor CMD, and no command was given")
    name = f"warmstart-launch-{os.getpid()}"
    buildah = store.buildah()
    container = stepping.output([*buildah, "from", "--pull=never", "--name", name, reference]).strip()
    state = imagestore.images_dir() / "runc"
    try:
        rootfs = stepping.output([*buildah, "mount", container]).strip()
        with tempfile.TemporaryDirectory(dir=imagestore.scratch_dir()) as bundle:
            stepping.output(["runc", "spec", "--bundle", bundle])
            template = json.loads(pathlib.Path(bundle, "config.json").read_text())
            spec = runtime_spec(template, config, argv, rootfs)
            pathlib.Path(bundle, "config.json").write_text(json.dumps(spec, indent=2))
            command = ["runc", "--root", str(state), "run", "--bundle", bundle, name]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
            finally:
                stepping.succeeds(["runc", "--root", str(state), "delete", "--force", name])
    finally:
        stepping.succeeds([*buildah, "umount", container])
        stepping.succeeds([*buildah, "rm", container])
    return Outcome(code=done.returncode, stdout=done.stdout, stderr=done.stderr)
