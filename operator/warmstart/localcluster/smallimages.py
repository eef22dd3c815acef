"""Building the real node's two one-file images from C sources in this package: pause, and a shell-less image.

- **pause** holds each pod sandbox's namespaces; containerd's ``sandbox_image`` must name it, because the upstream
  pause image's registry cannot be reached here.
- **shell-less** has one static binary and nothing else (no shell, no libc, no /etc), like a scratch or distroless
  image: the pre-pull DaemonSet must pull it although nothing in it can run ``sh`` (see render/daemonsets.py).

Each program is compiled with ``gcc -static`` and packed as a single layer (written here, with fixed owners and
times so the layer is reproducible) into the OCI layout with umoci. The tag is a key of the source and the compiler
version, so a present tag is current.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import pathlib
import shutil
import tarfile
import tempfile

from warmstart.localcluster import imagestore, stepping

logger = logging.getLogger(__name__)

PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"
CFLAGS = ("-Os", "-static", "-s", "-Wall", "-Wextra", "-Werror")


@dataclasses.dataclass(frozen=True)
class SmallImage:
    """What goes into one single-binary image."""

    repository: str
    program: str
    """``programs/<program>.c``, installed as ``/<program>``, the entrypoint."""
    user: str | None
    """The image's USER, or None for root like a scratch image (pods set their own runAsUser)."""


#: the upstream pause image runs as 65535 too
PAUSE = SmallImage(repository="warmstart/pause", program="pause", user="65535:65535")
SHELLLESS = SmallImage(repository="warmstart/shellless", program="hello", user=None)


def key(image: SmallImage, compiler_version: str) -> str:
    source = (PROGRAMS / f"{image.program}.c").read_bytes()
    parts = [source, compiler_version.encode(), " ".join(CFLAGS).encode(), (image.user or "").encode()]
    return imagestore.content_key(parts)


def ensure(image: SmallImage) -> imagestore.LocalImage:
    """``image`` in the OCI layout, compiled and packed first if missing (call under :func:`imagestore.build_lock`)."""
    for tool in ("gcc", "umoci"):
        if shutil.which(tool) is None:
            raise stepping.StepError(f"`{tool}` is not installed: run scripts/install-host-packages.sh")
    tag = key(image, stepping.output(["gcc", "-dumpfullversion"]).strip())
    layout = imagestore.oci_layout()
    local = imagestore.LocalImage(
        repository=image.repository, tag=tag, source=f"oci:{layout}:{_layout_tag(image, tag)}"
    )
    if layout.is_dir() and _layout_tag(image, tag) in stepping.output(["umoci", "ls", "--layout", str(layout)]).split():
        return local
    log = imagestore.logs_dir() / "small-images.log"
    with tempfile.TemporaryDirectory(dir=imagestore.scratch_dir()) as tmp:
        binary = pathlib.Path(tmp) / image.program
        stepping.run(image.program, ["gcc", *CFLAGS, "-o", str(binary), str(PROGRAMS / f"{image.program}.c")], log)
        layer = pathlib.Path(tmp) / "layer.tar"
        layer.write_bytes(single_file_layer(image.program, binary.read_bytes()))
        _pack(image, _layout_tag(image, tag), layer, log)
    logger.info("small image: built %s", local.name)
    return local


def single_file_layer(name: str, content: bytes) -> bytes:
    """An uncompressed layer tarball holding ``/<name>`` (mode 0755, root-owned, mtime 0) and nothing else."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(content), 0o755, 0
        tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _layout_tag(image: SmallImage, tag: str) -> str:
    """One layout holds every small image: its tags carry the repository's last part."""
    return f"{image.repository.rsplit('/', 1)[-1]}-{tag}"


def _pack(image: SmallImage, layout_tag: str, layer: pathlib.Path, log: pathlib.Path) -> None:
    """Assemble under a scratch tag, then tag it: a present final tag is always a complete image."""
    layout = imagestore.oci_layout()
    if not layout.is_dir():
        stepping.run("umoci", ["umoci", "init", "--layout", str(layout)], log, nice=False)
    partial = f"{layout}:{layout_tag}.partial"
    stepping.succeeds(["umoci", "rm", "--image", partial])
    stepping.run("umoci", ["umoci", "new", "--image", partial], log, nice=False)
    stepping.run("umoci", ["umoci", "raw", "add-layer", "--image", partial, str(layer)], log, nice=False)
    config = ["--config.entrypoint", f"/{image.program}", "--config.workingdir", "/"]
    if image.user is not None:
        config += ["--config.user", image.user]
    stepping.run("umoci", ["umoci", "config", "--image", partial, *config], log, nice=False)
    stepping.run("umoci", ["umoci", "tag", "--image", partial, layout_tag], log, nice=False)
    stepping.run("umoci", ["umoci", "rm", "--image", partial], log, nice=False)
    stepping.run("umoci", ["umoci", "gc", "--layout", str(layout)], log, nice=False)
