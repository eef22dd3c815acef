"""Building the project's image from its own Dockerfile with buildah: no Docker daemon, chroot isolation.

The build context is staged from the checkout: exactly the files ``.dockerignore`` lets through (the Dockerfile,
``pyproject.toml``, ``README.md``, ``operator/`` without bytecode, egg-info or a compiled routing core, and the
routing core's Rust sources). The tag is
``<project version>-<key>``, where the key hashes the staged context and the base image, so a changed source
builds a new image and an unchanged one is found in the store without running buildah at all. ``--layers`` keeps
intermediate layers, so a rebuild after a source change reuses the base and the busybox stage.

The base comes through the Dockerfile's ``PYTHON_IMAGE`` build argument (see :mod:`baseimage`). The host's CA
bundle is bind-mounted into the build's RUN steps (never into the image): a build host may reach package indexes
only through a TLS-inspecting proxy that only the host trusts.
"""

from __future__ import annotations

import fnmatch
import logging
import pathlib
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterator

from warmstart.localcluster import imagestore, pruning, stepping

logger = logging.getLogger(__name__)

REPOSITORY = "localhost/warmstart"
DOCKERFILE = "Dockerfile"
#: the build context: what .dockerignore admits (tests/unit/test_images.py keeps the two in step)
CONTEXT = (
    DOCKERFILE,
    "pyproject.toml",
    "README.md",
    "operator",
    "routing-core/Cargo.toml",
    "routing-core/Cargo.lock",
    "routing-core/src",
)
#: bytecode, egg-info and an editable install's compiled routing core (the image compiles its own)
EXCLUDED = ("__pycache__", "*.pyc", "*.egg-info", "_routing_core*.so")
BASE_ARGUMENT = "PYTHON_IMAGE"
HOST_CA_BUNDLE = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
MINUTES_COLD = 3
_MILESTONES = re.compile(r"STEP \d+/\d+|^COMMIT|^Successfully tagged")


def source_root() -> pathlib.Path:
    """The checkout this package runs from (an editable install); it must hold the Dockerfile."""
    root = pathlib.Path(__file__).resolve().parents[3]
    if not (root / DOCKERFILE).is_file():
        raise stepping.StepError(f"no {DOCKERFILE} in {root}: building the image needs a source checkout")
    return root


def version(source: pathlib.Path) -> str:
    """The project version from ``pyproject.toml``."""
    with (source / "pyproject.toml").open("rb") as handle:
        project: dict[str, object] = tomllib.load(handle)["project"]
    return str(project["version"])


def context_files(source: pathlib.Path) -> list[pathlib.Path]:
    """Every file of the build context, relative to ``source``, sorted."""

    def walk(path: pathlib.Path) -> Iterator[pathlib.Path]:
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in EXCLUDED):
            return
        if path.is_dir():
            for child in path.iterdir():
                yield from walk(child)
        elif path.is_file():
            yield path.relative_to(source)

    files = [file for entry in CONTEXT for file in walk(source / entry)]
    missing = [entry for entry in CONTEXT if not (source / entry).exists()]
    if missing:
        raise stepping.StepError(f"the build context lacks {', '.join(missing)} in {source}")
    return sorted(files)


def context_key(source: pathlib.Path, base_reference: str) -> str:
    """Key of the staged context (paths, modes, contents) and the base image it builds on."""

    def parts() -> Iterator[bytes]:
        yield base_reference.encode()
        for relative in context_files(source):
            path = source / relative
            yield f"{relative.as_posix()}:{path.stat().st_mode & 0o777:o}".encode()
            yield path.read_bytes()

    return imagestore.content_key(parts())


def reference(source: pathlib.Path, base_reference: str) -> str:
    return f"{REPOSITORY}:{version(source)}-{context_key(source, base_reference)}"


def ensure(store: imagestore.Store, base: imagestore.LocalImage, source: pathlib.Path) -> imagestore.LocalImage:
    """The project image for ``source`` on ``base``, built first if missing.

    Call under :func:`imagestore.build_lock`.
    """
    base_reference = imagestore.LOCAL_PREFIX + base.name
    ref = reference(source, base_reference)
    if store.has_image(ref):
        logger.info("project image: %s is current (same context and base)", ref)
    else:
        build(store, base_reference, source, ref)
    repository, tag = ref.removeprefix(imagestore.LOCAL_PREFIX).rsplit(":", 1)
    return imagestore.LocalImage(repository=repository, tag=tag, source=store.source(ref))


def build(store: imagestore.Store, base_reference: str, source: pathlib.Path, ref: str) -> None:
    """Stage the context and run ``buildah bud`` on the project's Dockerfile."""
    if shutil.which("buildah") is None:
        raise stepping.StepError("`buildah` is not installed: run scripts/install-host-packages.sh")
    label = "project image"
    log = imagestore.logs_dir() / f"project-{ref.rsplit(':', 1)[1]}.log"
    logger.info(
        "%s: building %s from %s (cold ~%d min, less with cached layers); log: %s",
        label,
        ref,
        source / DOCKERFILE,
        MINUTES_COLD,
        log,
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=imagestore.scratch_dir()) as context:
        for relative in context_files(source):
            target = pathlib.Path(context) / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relative, target)
        command = [
            *store.buildah(),
            "bud",
            "--isolation",
            "chroot",
            "--layers",
            "--pull=never",
            "--build-arg",
            f"{BASE_ARGUMENT}={base_reference}",
            *_trust_volumes(),
            "--tag",
            ref,
            "--file",
            f"{context}/{DOCKERFILE}",
            context,
        ]
        stepping.run(label, command, log, milestones=_MILESTONES)
    logger.info("%s: %s built in %.0f s", label, ref, time.monotonic() - started)
    pruning.prune(store, [ref, base_reference], log)


def _trust_volumes() -> list[str]:
    if not HOST_CA_BUNDLE.is_file():
        return []
    return ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
