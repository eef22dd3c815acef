"""Where the local cluster's images live and how they are named: the buildah store, the OCI layout, content keys.

Layout under ``${XDG_CACHE_HOME:-~/.cache}/warmstart/images``:

- ``containers/<driver>/``: the buildah (containers-storage) store of the Debian base and the project image;
  ``overlay`` where the kernel and filesystem allow it, else ``vfs``;
- ``oci/``: one OCI image layout holding the small images (pause, shell-less), built with umoci;
- ``logs/``: the full output of every build step;
- ``build.lock``: serialises builders, so two processes never build the same image at once.

Every tag ends with a content key (a hash of what went into the image), so a present tag is a complete,
current build and a changed input produces a new tag instead of a stale image.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import pathlib
from collections.abc import Iterable

from warmstart.localcluster import building, locking, stepping

logger = logging.getLogger(__name__)

#: hex digits of a content key in a tag
KEY_LENGTH = 12
DRIVERS = ("overlay", "vfs")
LOCAL_PREFIX = "localhost/"


@dataclasses.dataclass(frozen=True)
class Store:
    """A containers-storage store that buildah and skopeo both address."""

    root: pathlib.Path
    runroot: pathlib.Path
    driver: str

    def buildah(self) -> list[str]:
        """``buildah`` with this store's global options."""
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", self.driver]

    def source(self, reference: str) -> str:
        """The containers-image transport name of ``reference`` in this store (for skopeo)."""
        return f"containers-storage:[{self.driver}@{self.root}+{self.runroot}]{reference}"

    def has_image(self, reference: str) -> bool:
        return stepping.succeeds([*self.buildah(), "inspect", "--type", "image", reference])


@dataclasses.dataclass(frozen=True)
class LocalImage:
    """An image built on this machine, before any push."""

    repository: str
    """Repository path without registry, e.g. ``warmstart`` or ``warmstart/pause``."""
    tag: str
    source: str
    """Where skopeo reads it: ``containers-storage:[...]localhost/warmstart:<tag>`` or ``oci:<layout>:<tag>``."""

    @property
    def name(self) -> str:
        """``repository:tag``, the part of a reference that stays the same in every registry."""
        return f"{self.repository}:{self.tag}"


def images_dir() -> pathlib.Path:
    return building.cache_root() / "images"


def logs_dir() -> pathlib.Path:
    return images_dir() / "logs"


def oci_layout() -> pathlib.Path:
    return images_dir() / "oci"


def scratch_dir() -> pathlib.Path:
    """Where build contexts, root filesystem tarballs and runc bundles live while a step needs them."""
    path = images_dir() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(parts: Iterable[bytes]) -> str:
    """A short hash of a sequence of byte strings (each length-prefixed, so boundaries count)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:KEY_LENGTH]


def store() -> Store:
    """The buildah store: an existing one is reused; a new one uses overlay if this machine supports it, else vfs."""
    base = images_dir() / "containers"
    # one run-time directory per store: two caches (say XDG_CACHE_HOME=/elsewhere) must not share mount state
    runroot_base = _runroot_base() / content_key([str(base).encode()])
    for driver in DRIVERS:
        if (base / driver).is_dir():
            return Store(base / driver, runroot_base / driver, driver)
    for driver in DRIVERS:
        candidate = Store(base / driver, runroot_base / driver, driver)
        if stepping.succeeds([*candidate.buildah(), "info"]):
            candidate.root.mkdir(parents=True, exist_ok=True)
            logger.info("image store: %s (driver %s)", candidate.root, driver)
            return candidate
        logger.info("image store: the %s storage driver does not work here", driver)
    raise stepping.StepError(f"buildah works with none of the storage drivers {', '.join(DRIVERS)} here")


def _runroot_base() -> pathlib.Path:
    """Run-time state (mount counts, locks) of the store; it belongs on /run, which a reboot clears."""
    if os.geteuid() == 0:
        return pathlib.Path("/run/warmstart-buildah")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return pathlib.Path(runtime) / "warmstart-buildah" if runtime else images_dir() / "run"


def build_lock() -> contextlib.AbstractContextManager[None]:
    """Hold the image build lock (waiting, with a message, while another process builds)."""
    return locking.exclusive(images_dir() / "build.lock", "building images")
