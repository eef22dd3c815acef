"""Pushing a locally built image to the local cluster's registry (plain HTTP on loopback) with skopeo.

skopeo reads the image where it was built (the buildah store or the OCI layout) and copies only the blobs the
registry lacks, so pushing an image that is already there costs one manifest check.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from typing import Protocol

from warmstart.localcluster import imagestore, stepping

logger = logging.getLogger(__name__)

_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:\d+)?$")


class Pushable(Protocol):
    """Any locally built image: :class:`imagestore.LocalImage`, or another OCI layout with the same two names."""

    @property
    def name(self) -> str:
        """``repository:tag``."""

    @property
    def source(self) -> str:
        """Where skopeo reads it (``oci:...``, ``containers-storage:...``)."""


def destination(image: Pushable, registry: str) -> str:
    """The reference pods use for ``image`` once it is in ``registry`` (``host:port``)."""
    if not _REGISTRY.match(registry):
        raise ValueError(f"registry must be host[:port], not {registry!r}")
    return f"{registry}/{image.name}"


def push(image: Pushable, registry: str) -> str:
    """Copy ``image`` to ``registry`` (``127.0.0.1:5000``); return the reference that pods pull."""
    if shutil.which("skopeo") is None:
        raise stepping.StepError("`skopeo` is not installed: run scripts/install-host-packages.sh")
    target = destination(image, registry)
    started = time.monotonic()
    log = imagestore.logs_dir() / "push.log"
    # the local registry serves plain HTTP on loopback, so TLS verification is off for the destination only
    command = ["skopeo", "copy", "--retry-times", "2", "--dest-tls-verify=false", image.source, f"docker://{target}"]
    stepping.run("push", command, log, nice=False)
    logger.info("pushed %s in %.1f s", target, time.monotonic() - started)
    return target
