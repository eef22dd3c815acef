"""The llama.cpp engine image (``images/llamacpp/Dockerfile``) built with buildah, and its binary for host processes.

The Dockerfile compiles llama.cpp's ``llama-server`` from the llama.cpp source vendored in a pinned, hash-checked
PyPI sdist of llama-cpp-python. Here it builds on the local cluster's Debian base (both stages, through the
``BUILD_IMAGE`` and ``RUNTIME_IMAGE`` build arguments). The tag is ``<llama-cpp-python version>-<key>``, the key
hashing the Dockerfile and the base, so an unchanged Dockerfile finds its image without running buildah.

The compile happens once: benchmarks that run engines as host processes copy the binary out of the built image
(:func:`host_binary`) into ``~/.cache/warmstart/bin``, keyed by the same tag, instead of compiling a second time.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import re
import shutil
import tempfile
import time

from warmstart.localcluster import building, imagestore, locking, projectimage, pruning, stepping

logger = logging.getLogger(__name__)

REPOSITORY = "localhost/warmstart-llamacpp"
DOCKERFILE = pathlib.Path("images") / "llamacpp" / "Dockerfile"
BINARY = "/usr/local/bin/llama-server"
BASE_ARGUMENTS = ("BUILD_IMAGE", "RUNTIME_IMAGE")
#: the first build on 2 cores at load ~20, niced (docs/engine.md#build-time); later builds find the tag in a second
MINUTES_COLD = 60
_VERSION = re.compile(r"^ARG LLAMA_CPP_PYTHON_VERSION=(\S+)$", re.MULTILINE)
# buildah's steps, and CMake's progress every tenth of the way (its "[ 40%]" lines)
_MILESTONES = re.compile(r"STEP \d+/\d+|^COMMIT|^Successfully tagged|^\[\s*\d0%\]|^\[100%\] Built target llama-server")


def lock() -> contextlib.AbstractContextManager[None]:
    """The engine's own build lock (concurrent callers wait for one compile)."""
    return locking.exclusive(imagestore.images_dir() / "engine-build.lock", "compiling the llama.cpp engine image")


def dockerfile(source: pathlib.Path) -> pathlib.Path:
    path = source / DOCKERFILE
    if not path.is_file():
        raise stepping.StepError(f"no {DOCKERFILE} in {source}: building the engine image needs a source checkout")
    return path


def version(source: pathlib.Path) -> str:
    """The pinned llama-cpp-python version, read from the Dockerfile's ARG (the one place it is written)."""
    found = _VERSION.search(dockerfile(source).read_text())
    if found is None:
        raise stepping.StepError(f"{DOCKERFILE} declares no ARG LLAMA_CPP_PYTHON_VERSION=<version>")
    return found.group(1)


def reference(source: pathlib.Path, base_reference: str) -> str:
    key = imagestore.content_key([base_reference.encode(), dockerfile(source).read_bytes()])
    return f"{REPOSITORY}:{version(source)}-{key}"


def ensure(store: imagestore.Store, base: imagestore.LocalImage, source: pathlib.Path) -> imagestore.LocalImage:
    """The engine image for ``source``'s Dockerfile on ``base``, built first if missing.

    Call under :func:`lock`.
    """
    base_reference = imagestore.LOCAL_PREFIX + base.name
    ref = reference(source, base_reference)
    if store.has_image(ref):
        logger.info("engine image: %s is current (same Dockerfile and base)", ref)
    else:
        build(store, base_reference, source, ref)
    repository, tag = ref.removeprefix(imagestore.LOCAL_PREFIX).rsplit(":", 1)
    return imagestore.LocalImage(repository=repository, tag=tag, source=store.source(ref))


def build(store: imagestore.Store, base_reference: str, source: pathlib.Path, ref: str) -> None:
    """Run ``buildah bud`` on the engine's Dockerfile (its own directory is the context), niced."""
    if shutil.which("buildah") is None:
        raise stepping.StepError("`buildah` is not installed: run scripts/install-host-packages.sh")
    label = "engine image"
    log = imagestore.logs_dir() / f"llamacpp-{ref.rsplit(':', 1)[1]}.log"
    path = dockerfile(source)
    logger.info(
        "%s: compiling llama.cpp's llama-server into %s (cold: up to ~%d min on 2 busy cores; once); log: %s",
        label,
        ref,
        MINUTES_COLD,
        log,
    )
    started = time.monotonic()
    arguments = [item for name in BASE_ARGUMENTS for item in ("--build-arg", f"{name}={base_reference}")]
    with tempfile.TemporaryDirectory(dir=imagestore.scratch_dir()) as context:
        shutil.copy2(path, pathlib.Path(context) / "Dockerfile")
        command = [
            *store.buildah(),
            "bud",
            "--isolation",
            "chroot",
            "--layers",
            "--pull=never",
            *arguments,
            *_trust_volumes(),
            "--tag",
            ref,
            "--file",
            f"{context}/Dockerfile",
            context,
        ]
        stepping.run(label, command, log, milestones=_MILESTONES)
    logger.info("%s: %s built in %.0f s", label, ref, time.monotonic() - started)
    # only this repository's stale tags: sweeping dangling images could remove a concurrent project build's layers
    pruning.prune(store, [ref], log, sweep=False)


def host_binary(store: imagestore.Store, image: imagestore.LocalImage) -> pathlib.Path:
    """``llama-server`` copied out of ``image`` into the binary cache (once per tag), for engines run on the host.

    Call under :func:`lock`. The binary needs only glibc (bookworm's or newer).
    """
    target = building.cache_root() / "bin" / f"llama-server-{image.tag}"
    if target.is_file():
        return target
    buildah = store.buildah()
    container = stepping.output([*buildah, "from", "--pull=never", imagestore.LOCAL_PREFIX + image.name]).strip()
    try:
        root = pathlib.Path(stepping.output([*buildah, "mount", container]).strip())
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(root / BINARY.lstrip("/"), partial)
        partial.chmod(0o755)
        partial.replace(target)
    finally:
        stepping.succeeds([*buildah, "umount", container])
        stepping.succeeds([*buildah, "rm", container])
    logger.info("engine binary: %s (from %s)", target, image.name)
    return target


def _trust_volumes() -> list[str]:
    bundle = projectimage.HOST_CA_BUNDLE
    return ["--volume", f"{bundle}:{bundle}:ro"] if bundle.is_file() else []
