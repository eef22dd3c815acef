"""Building the Debian Python base that stands in for ``python:3.11-slim-bookworm`` where that cannot be pulled.

Debian bookworm ships Python 3.11. mmdebstrap writes a minimal root filesystem (essential packages, apt, python3
with venv, ``python`` on PATH as the official image has it, CA certificates), and buildah commits it as a local
image. The Dockerfile then builds FROM it through its ``PYTHON_IMAGE`` build argument, unchanged for users who
pull the official image. apt in the base keeps mmdebstrap's sources, so ``apt-get install`` works in the build.

The tag ends with a key of the suite, the package list and every option, so the base (about two minutes and a
download of ~40 MB) is built once per machine and rebuilt only when one of those changes.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time

from warmstart.localcluster import imagestore, stepping

logger = logging.getLogger(__name__)

SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
REPOSITORY = "localhost/warmstart-base"
#: what the official python image sets too (its python lives in /usr/local/bin; Debian's in /usr/bin)
ENV = (
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LANG", "C.UTF-8"),
)
CMD = '["python3"]'
MMDEBSTRAP_OPTIONS = (
    "--variant=apt",
    # merged /usr without the usrmerge package (which would pull in perl)
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--skip=output/dev",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    '--aptopt=Acquire::Languages "none"',
    '--aptopt=APT::Install-Recommends "false"',
)
MINUTES_COLD = 2
_MILESTONES = re.compile(r"^I: (?!removing|cleaning)")


def key() -> str:
    """Content key of everything that decides the base's content."""
    parts = [SUITE, *PACKAGES, *MMDEBSTRAP_OPTIONS, *(f"{name}={value}" for name, value in ENV), CMD]
    return imagestore.content_key(part.encode() for part in parts)


def reference() -> str:
    return f"{REPOSITORY}:{SUITE}-{key()}"


def ensure(store: imagestore.Store) -> imagestore.LocalImage:
    """The base image in ``store``, built first if missing (call under :func:`imagestore.build_lock`)."""
    ref = reference()
    if not store.has_image(ref):
        build(store, ref)
    repository, tag = ref.removeprefix(imagestore.LOCAL_PREFIX).rsplit(":", 1)
    return imagestore.LocalImage(repository=repository, tag=tag, source=store.source(ref))


def build(store: imagestore.Store, ref: str) -> None:
    """mmdebstrap a root filesystem into a tarball, then commit it as ``ref`` with buildah."""
    for tool in ("mmdebstrap", "buildah"):
        if shutil.which(tool) is None:
            raise stepping.StepError(f"`{tool}` is not installed: run scripts/install-host-packages.sh")
    log = imagestore.logs_dir() / f"base-{SUITE}-{key()}.log"
    label = "base image"
    started = time.monotonic()
    logger.info(
        "%s: building %s from Debian packages (%s), first time only, ~%d min; log: %s",
        label,
        ref,
        ", ".join(PACKAGES),
        MINUTES_COLD,
        log,
    )
    with tempfile.TemporaryDirectory(dir=imagestore.scratch_dir()) as tmp:
        rootfs = f"{tmp}/rootfs.tar"
        command = ["mmdebstrap", *MMDEBSTRAP_OPTIONS, f"--include={','.join(PACKAGES)}", SUITE, rootfs]
        seconds = stepping.run(label, command, log, milestones=_MILESTONES)
        logger.info("%s: root filesystem ready in %.0f s; committing it", label, seconds)
        buildah = store.buildah()
        container = stepping.output([*buildah, "from", "scratch"]).strip()
        try:
            stepping.run(label, [*buildah, "add", container, rootfs, "/"], log)
            config = [f"--env={name}={value}" for name, value in ENV]
            stepping.run(label, [*buildah, "config", *config, f"--cmd={CMD}", container], log, nice=False)
            stepping.run(label, [*buildah, "commit", "--rm", container, ref], log)
        except stepping.StepError:
            stepping.succeeds([*buildah, "rm", container])
            raise
    logger.info("%s: %s built in %.0f s", label, ref, time.monotonic() - started)
