"""Building the busybox test image, as an OCI layout in the user cache: Debian's busybox-static with a few applet
links, /etc/passwd and /tmp: a small image with a shell, ``wget`` and ``httpd`` for tests that need a real container.
(The pause image is built by :mod:`smallimages`, see ``imaging.pause_image()``.)

Each layer is a tar written here (uid 0, mtime 0), added with ``umoci raw add-layer``, so no
unpacking (and no root) is needed. A layout is rebuilt only when its inputs change: the directory
name carries a hash of them (``${XDG_CACHE_HOME:-~/.cache}/warmstart/images/layouts/<name>-<key>/``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

from warmstart.localcluster import building

BUSYBOX = pathlib.Path("/bin/busybox")
BUSYBOX_APPLETS = (
    "sh",
    "ls",
    "cat",
    "echo",
    "sleep",
    "id",
    "env",
    "hostname",
    "wget",
    "nc",
    "httpd",
    "true",
    "false",
    "printf",
    "mkdir",
    "cp",
    "rm",
    "test",
    "grep",
    "head",
    "tail",
    "wc",
    "du",
    "df",
    "mount",
    "ps",
    "kill",
    "date",
    "touch",
    "stat",
    "sha256sum",
    "dd",
    "find",
    "xargs",
    "seq",
    "tr",
    "sed",
    "awk",
    "ip",
    "timeout",  # use `timeout 3 wget ...`: this busybox's `wget -T` segfaults
    "ssl_client",  # wget runs it for https (its TLS cannot talk to Go servers with ECDSA certs, though)
)


class ImageBuildError(RuntimeError):
    """gcc or umoci failed, or what they need is missing; the message says which."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """One image in an OCI layout directory of its own."""

    repository: str
    tag: str
    path: pathlib.Path

    @property
    def source(self) -> str:
        """Where skopeo reads it."""
        return f"oci:{self.path}:{self.tag}"

    @property
    def name(self) -> str:
        """``repository:tag``, the part of a reference that stays the same in every registry."""
        return f"{self.repository}:{self.tag}"


def busybox() -> Layout:
    """A busybox image (``busybox:<version>``) from the host's static busybox."""
    if not BUSYBOX.is_file():
        raise ImageBuildError(f"{BUSYBOX} is missing: install busybox-static (scripts/install-host-packages.sh)")
    binary = BUSYBOX.read_bytes()
    key = hashlib.sha256(binary + " ".join(BUSYBOX_APPLETS).encode()).hexdigest()[:12]
    layout = Layout("busybox", "1", _cache() / f"busybox-{key}")
    if not _complete(layout):
        _require("umoci")
        files = {
            "bin/busybox": (binary, 0o755),
            "etc/passwd": (b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644),
            "etc/group": (b"root:x:0:\nnobody:x:65534:\n", 0o644),
        }
        links = {f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS}
        layer = _tar(files, dirs=(("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("root", 0o700)), links=links)
        _assemble(layout, layer, ["--config.cmd=/bin/sh", "--config.env=PATH=/bin", "--config.workingdir=/"])
    return layout


def _cache() -> pathlib.Path:
    return building.cache_root() / "images" / "layouts"


def _complete(layout: Layout) -> bool:
    return (layout.path / "index.json").is_file()


def _assemble(layout: Layout, layer: bytes, config: list[str]) -> None:
    """``umoci init/new/raw add-layer/config`` into a scratch layout, then rename it into place."""
    staging = layout.path.with_name(f".{layout.path.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    image = f"{staging}:{layout.tag}"
    with tempfile.NamedTemporaryFile(suffix=".tar") as tar:
        tar.write(layer)
        tar.flush()
        _run(["umoci", "init", "--layout", str(staging)])
        _run(["umoci", "new", "--image", image])
        _run(["umoci", "raw", "add-layer", "--image", image, tar.name])
        _run(["umoci", "config", "--image", image, "--os=linux", "--architecture=amd64", *config])
    _run(["umoci", "gc", "--layout", str(staging)])
    shutil.rmtree(layout.path, ignore_errors=True)
    staging.rename(layout.path)


def _tar(files: dict[str, tuple[bytes, int]], dirs: tuple[tuple[str, int], ...], links: dict[str, str]) -> bytes:
    """An uncompressed layer tar, owned by root, every mtime 0, so the same inputs give the same digest."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for name, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buffer.getvalue()


def _require(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} not on PATH: run scripts/install-host-packages.sh")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageBuildError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
