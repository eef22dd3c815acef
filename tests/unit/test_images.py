"""The local cluster's images: the build context matches the Dockerfile, tags follow content, containers run like pods.

These tests need no buildah store: they check the pure parts (context, keys, runtime spec, pruning choices) and
build the two one-file images (gcc + umoci, about a second) into a temporary cache. The real project image is
built and run by scripts/check-dockerfile.sh, which CI runs.
"""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import struct
import subprocess
import tarfile
from typing import Any

import pytest

from warmstart.localcluster import imagecli, launching, projectimage, pruning, pushing, smallimages, stepping
from warmstart.localcluster.imagestore import LocalImage
from warmstart.render import daemonsets

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _dockerfile_copy_sources() -> set[str]:
    sources: set[str] = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from=") for word in words):
            sources.update(word.rstrip("/") for word in words[1:-1])
    return sources


def test_the_staged_context_holds_what_the_dockerfile_copies_and_dockerignore_admits() -> None:
    admitted = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    assert admitted == set(projectimage.CONTEXT) - {projectimage.DOCKERFILE}
    assert _dockerfile_copy_sources() <= set(projectimage.CONTEXT)
    files = {path.as_posix() for path in projectimage.context_files(ROOT)}
    assert {"Dockerfile", "pyproject.toml", "README.md", "operator/warmstart/cli.py"} <= files
    assert not [name for name in files if "__pycache__" in name or name.endswith(".pyc") or ".egg-info" in name]


def _mini_checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    for name, text in {
        "Dockerfile": "FROM scratch\n",
        "pyproject.toml": '[project]\nname = "x"\nversion = "1.2.3"\n',
        "README.md": "x\n",
        "operator/pkg/mod.py": "A = 1\n",
        "routing-core/Cargo.toml": "[package]\n",
        "routing-core/Cargo.lock": "version = 4\n",
        "routing-core/src/lib.rs": "\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_project_tag_follows_the_source_and_the_base_but_not_bytecode(tmp_path: pathlib.Path) -> None:
    source = _mini_checkout(tmp_path)
    base = "localhost/warmstart-base:bookworm-aaa"
    first = projectimage.reference(source, base)
    assert first.startswith("localhost/warmstart:1.2.3-")
    (source / "operator/pkg/__pycache__").mkdir()
    (source / "operator/pkg/__pycache__/mod.cpython-311.pyc").write_bytes(b"\0")
    assert projectimage.reference(source, base) == first
    assert projectimage.reference(source, "localhost/warmstart-base:bookworm-bbb") != first
    (source / "operator/pkg/mod.py").write_text("A = 2\n")
    assert projectimage.reference(source, base) != first


def test_a_container_starts_like_a_pod_with_the_image_config() -> None:
    config = launching.ImageConfig(
        entrypoint=("warmstart",), cmd=("--help",), user="65532:65532", env=("HOME=/tmp",), working_dir="/tmp"
    )
    assert launching.process_args(config, None, None) == ["warmstart", "--help"]
    assert launching.process_args(config, None, ["crds", "--stdout"]) == ["warmstart", "crds", "--stdout"]
    assert launching.process_args(config, [daemonsets.NOOP_BINARY], ["true"]) == [daemonsets.NOOP_BINARY, "true"]
    assert launching.process_args(config, [daemonsets.NOOP_BINARY], None) == [daemonsets.NOOP_BINARY]

    template: dict[str, Any] = {
        "process": {"args": ["sh"], "capabilities": {"bounding": ["CAP_KILL"]}, "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs", "readonly": False},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    }
    spec = launching.runtime_spec(template, config, ["warmstart"], "/mnt/image")
    assert spec["root"] == {"path": "/mnt/image", "readonly": True}
    assert spec["process"]["user"] == {"uid": 65532, "gid": 65532}
    assert spec["process"]["cwd"] == "/tmp" and spec["process"]["noNewPrivileges"] is True
    assert all(caps == [] for caps in spec["process"]["capabilities"].values())
    assert spec["process"]["env"][0].startswith("PATH=")  # the image set none: runtimes add a default
    assert [m["type"] for m in spec["mounts"] if m["destination"] == "/tmp"] == ["tmpfs"]
    assert template["root"]["readonly"] is False  # the template is not modified


@pytest.mark.parametrize("user", ["nonroot", "65532:staff"])
def test_a_named_user_is_refused(user: str) -> None:
    with pytest.raises(stepping.StepError):
        launching.numeric_user(user)


def test_the_single_file_layer_is_reproducible_and_holds_only_the_binary() -> None:
    layer = smallimages.single_file_layer("pause", b"\x7fELF...")
    assert layer == smallimages.single_file_layer("pause", b"\x7fELF...")
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
    assert (member.name, member.mode, member.uid, member.gid, member.mtime) == ("pause", 0o755, 0, 0, 0)


BUILD_OUTPUT = """[1/3] STEP 1/9: FROM localhost/warmstart-base:bookworm-e29e4b60d8a3 AS builder
--> Using cache 6edae6fe5e5a4f1f90894647d32113353a72435e86962c91b6531e8780e50c75
--> 6edae6fe5e5
[1/3] STEP 9/9: RUN pip install .
Successfully installed warmstart-0.1.0
--> d3142e2d359
Successfully tagged localhost/warmstart:0.1.0-0051fcc2fa5b
"""


def test_pruning_keeps_what_the_build_used_and_the_newest_tags() -> None:
    assert pruning.used_image_ids(BUILD_OUTPUT) == {
        "6edae6fe5e5a4f1f90894647d32113353a72435e86962c91b6531e8780e50c75",
        "6edae6fe5e5",
        "d3142e2d359",
    }
    tags = [
        ("localhost/warmstart:0.1.0-old1", 100),
        ("localhost/warmstart:0.1.0-new", 400),
        ("localhost/warmstart:0.1.0-old2", 200),
        ("localhost/warmstart:0.1.0-old3", 300),
        ("localhost/warmstart-base:bookworm-x", 50),
    ]
    assert pruning.stale_tags(tags, "localhost/warmstart:0.1.0-new", newest=3) == ["localhost/warmstart:0.1.0-old1"]
    # the current tag stays even when it is not among the newest
    assert pruning.stale_tags(tags, "localhost/warmstart:0.1.0-old1", newest=1) == [
        "localhost/warmstart:0.1.0-old3",
        "localhost/warmstart:0.1.0-old2",
    ]
    assert pruning.stale_tags(tags, "localhost/warmstart-base:bookworm-x", newest=3) == []


def test_a_pushed_image_is_named_after_the_registry() -> None:
    image = LocalImage(repository="warmstart/pause", tag="abc", source="oci:/x:pause-abc")
    assert pushing.destination(image, "127.0.0.1:5000") == "127.0.0.1:5000/warmstart/pause:abc"
    with pytest.raises(ValueError):
        pushing.destination(image, "http://127.0.0.1:5000")


def _static_elf(data: bytes) -> bool:
    """An x86-64 ELF executable with neither an interpreter (PT_INTERP) nor dynamic section (PT_DYNAMIC)."""
    if data[:4] != b"\x7fELF":
        return False
    offset, size, count = struct.unpack_from("<Q", data, 0x20)[0], *struct.unpack_from("<HH", data, 0x36)
    types = {struct.unpack_from("<I", data, offset + index * size)[0] for index in range(count)}
    return not types & {2, 3}


def test_an_unknown_image_kind_fails_the_cli_before_building(capsys: pytest.CaptureFixture[str]) -> None:
    assert imagecli.main(["build", "--only", "project,bogus"]) == 1
    assert "bogus" in capsys.readouterr().err


def test_the_small_images_are_one_static_binary_each(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [tool for tool in ("gcc", "umoci") if not shutil.which(tool)]
    assert not missing, f"{missing} not installed: run scripts/install-host-packages.sh"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pause = smallimages.ensure(smallimages.PAUSE)
    shellless = smallimages.ensure(smallimages.SHELLLESS)
    assert smallimages.ensure(smallimages.PAUSE) == pause  # the second call finds it by its tag
    assert (pause.repository, shellless.repository) == ("warmstart/pause", "warmstart/shellless")
    layout = tmp_path / "warmstart/images/oci"
    for image, binary in ((pause, "pause"), (shellless, "hello")):
        unpacked = tmp_path / binary
        subprocess.run(
            ["umoci", "raw", "unpack", "--image", image.source.removeprefix("oci:"), str(unpacked)],
            check=True,
            capture_output=True,
        )
        assert sorted(path.name for path in unpacked.iterdir()) == [binary]  # no shell, no libc, nothing else
        assert _static_elf((unpacked / binary).read_bytes())
        index = json.loads((layout / "index.json").read_text())
        assert any(
            m["annotations"]["org.opencontainers.image.ref.name"] == image.source.rsplit(":", 1)[1]
            for m in index["manifests"]
        )
    shellless_run = subprocess.run([str(tmp_path / "hello" / "hello")], capture_output=True, text=True)
    assert shellless_run.stdout == "warmstart shell-less test image\n"
