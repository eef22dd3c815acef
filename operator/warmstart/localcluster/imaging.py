"""The images the local cluster's real node runs, each built once and cached by content (``pushing`` pushes them).

- the **project** image, from the project's own Dockerfile on the Debian Python base (:mod:`projectimage`);
- the **pause** image for containerd's ``sandbox_image`` and the **shell-less** test image (:mod:`smallimages`);
- on request only, the **llamacpp** engine image, llama.cpp's server compiled from pinned source (:mod:`engineimage`).

Every function takes the build lock, so concurrent callers (two pytest sessions, ``make demo``) wait for one build.
"""

from __future__ import annotations

import enum
import pathlib
from collections.abc import Callable, Iterable

from warmstart.localcluster import baseimage, engineimage, imagestore, projectimage, smallimages


class Kind(str, enum.Enum):
    """Which image."""

    PROJECT = "project"
    PAUSE = "pause"
    SHELLLESS = "shellless"
    LLAMACPP = "llamacpp"


#: what ``build`` makes unless asked: the engine image compiles for minutes, so only its users ask
DEFAULT_KINDS = (Kind.PROJECT, Kind.PAUSE, Kind.SHELLLESS)


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


def engine_image(source: pathlib.Path | None = None) -> imagestore.LocalImage:
    """The llama.cpp engine image from ``source``'s ``images/llamacpp/Dockerfile``, compiled first if missing.

    The compile holds a lock of its own, not the build lock: the project image can build, and tests can find it,
    while the engine compiles (CI starts that compile in the background).
    """
    checkout = source or projectimage.source_root()
    store = imagestore.store()
    with imagestore.build_lock():
        base = baseimage.ensure(store)
    with engineimage.lock():
        return engineimage.ensure(store, base, checkout)


def engine_binary(source: pathlib.Path | None = None) -> pathlib.Path:
    """``llama-server`` for host processes: the engine image's own binary (built first if missing), never recompiled."""
    image = engine_image(source)
    with engineimage.lock():
        return engineimage.host_binary(imagestore.store(), image)


def build(
    kinds: Iterable[Kind] = DEFAULT_KINDS, source: pathlib.Path | None = None
) -> dict[Kind, imagestore.LocalImage]:
    """Each requested image, built where missing."""
    makers: dict[Kind, Callable[[], imagestore.LocalImage]] = {
        Kind.PROJECT: lambda: project_image(source),
        Kind.PAUSE: pause_image,
        Kind.SHELLLESS: shellless_image,
        Kind.LLAMACPP: lambda: engine_image(source),
    }
    return {kind: makers[kind]() for kind in kinds}
