"""The images the local cluster's real node runs, each built once and cached by content (``pushing`` pushes them).

- the **project** image, from the project's own Dockerfile on the Debian Python base (:mod:`projectimage`);
- the **pause** image for containerd's ``sandbox_image`` and the **shell-less** test image (:mod:`smallimages`).

Every function takes the build lock, so concurrent callers (two pytest sessions, ``make demo``) wait for one build.
"""

from __future__ import annotations

import enum
import pathlib
from collections.abc import Iterable

from warmstart.localcluster import baseimage, imagestore, projectimage, smallimages


class Kind(str, enum.Enum):
    """Which image."""

    PROJECT = "project"
    PAUSE = "pause"
    SHELLLESS = "shellless"


def project_image(source: pathlib.Path | None = None) -> imagestore.LocalImage:
    """The project's image built from ``source`` (default: this checkout), with its base built first if needed."""
    checkout = source or projectimage.source_root()
    store = imagestore.store()
    with imagestore.build_lock():
        base = baseimage.ensure(store)
        return projectimage.ensure(store, base, checkout)


def pause_image() -> imagestore.LocalImage:
    with imagestore.build_lock():
        return smallimages.ensure(smallimages.PAUSE)


def shellless_image() -> imagestore.LocalImage:
    with imagestore.build_lock():
        return smallimages.ensure(smallimages.SHELLLESS)


def build(kinds: Iterable[Kind] = tuple(Kind), source: pathlib.Path | None = None) -> dict[Kind, imagestore.LocalImage]:
    """Each requested image, built where missing."""
    makers = {Kind.PROJECT: lambda: project_image(source), Kind.PAUSE: pause_image, Kind.SHELLLESS: shellless_image}
    return {kind: makers[kind]() for kind in kinds}
