"""Building the control-plane binaries from the Go module proxy, once per version, into the user cache.

Layout under ``${XDG_CACHE_HOME:-~/.cache}/warmstart``:

- ``bin/<binary>-<version>/<binary>``: the binary, plus ``build.json`` (wall time, peak RSS, go version);
- ``src/<build>-<version>/``: the wrapper module (go.mod, go.sum, tools.go) and ``build.log``.

A binary directory appears atomically (built aside, then renamed), so a present directory
is a complete build and is reused without a look at Go. A file lock keeps two processes
(say, two pytest sessions) from building the same thing at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Mapping

from warmstart.localcluster import locking, versions

logger = logging.getLogger(__name__)

#: How often a running build says it is still running.
PROGRESS_SECONDS = 60.0


class BuildError(RuntimeError):
    """A Go toolchain step failed; the message ends with the tail of its log."""


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Absolute paths of every binary the local cluster runs."""

    etcd: pathlib.Path
    kube_apiserver: pathlib.Path
    kube_controller_manager: pathlib.Path
    kube_scheduler: pathlib.Path
    kwok: pathlib.Path
    helm: pathlib.Path


@dataclasses.dataclass(frozen=True)
class NodeBinaries:
    """Absolute paths of what a real node and its S3 server run (containerd and runc come from the OS)."""

    kubelet: pathlib.Path
    kube_proxy: pathlib.Path
    versitygw: pathlib.Path


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one toolchain command cost."""

    wall_seconds: float
    peak_rss_bytes: int
    """Largest resident set of the command or any one of its child processes (compile, link)."""
    cpu_seconds: float = 0.0
    """User plus system CPU time of the command and its children: unlike wall time, not inflated by a busy machine."""


def cache_root() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "warmstart"


def binary_path(binary: str, version: str) -> pathlib.Path:
    return cache_root() / "bin" / f"{binary}-{version}" / binary


def missing(builds: tuple[versions.Build, ...] = versions.CONTROL_PLANE) -> list[versions.Build]:
    """The builds (of ``builds``) that have at least one binary not yet in the cache."""
    return [
        build for build in builds if not all(binary_path(name, build.version).is_file() for name, _ in build.binaries)
    ]


def ensure(builds: tuple[versions.Build, ...]) -> None:
    """Build (slowly, once) whatever of ``builds`` is missing from the cache."""
    todo = missing(builds)
    if todo:
        with _build_lock():
            for build in missing(tuple(todo)):  # another process may have built some meanwhile
                build_one(build)


def ensure_node_binaries() -> NodeBinaries:
    """Return the cached binaries of the real nodes and the S3 server, building whatever is missing."""
    ensure(versions.REAL_NODES)
    return NodeBinaries(
        kubelet=binary_path("kubelet", versions.KUBERNETES),
        kube_proxy=binary_path("kube-proxy", versions.KUBERNETES),
        versitygw=binary_path("versitygw", versions.VERSITYGW),
    )


def ensure_binaries() -> Binaries:
    """Return the cached control-plane binaries, building (slowly, once) whatever is missing."""
    ensure(versions.CONTROL_PLANE)

    def path(name: str, version: str) -> pathlib.Path:
        return binary_path(name, version)

    return Binaries(
        etcd=path("etcd", versions.ETCD),
        kube_apiserver=path("kube-apiserver", versions.KUBERNETES),
        kube_controller_manager=path("kube-controller-manager", versions.KUBERNETES),
        kube_scheduler=path("kube-scheduler", versions.KUBERNETES),
        kwok=path("kwok", versions.KWOK),
        helm=path("helm", versions.HELM),
    )


def build_one(build: versions.Build) -> None:
    """Build every binary of ``build`` that is missing from the cache."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH: install Go (1.26 or newer) to build the local cluster")
    env = go_env()
    workdir = cache_root() / "src" / f"{build.name}-{build.version}"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "build.log"
    go_version = _output([go, "env", "GOVERSION"], cwd=workdir, env=env).strip()
    names = ", ".join(name for name, _ in build.binaries)
    logger.info(
        "building %s %s from Go modules with %s, first time only, ~%d minutes on 2 cores "
        "(less with a warm Go build cache); log: %s",
        names,
        build.version,
        go_version,
        build.minutes_cold,
        log_path,
    )
    prepare_seconds = 0.0
    if build.recipe is versions.Recipe.WRAPPER:
        started = time.monotonic()
        _prepare_wrapper(go, build, workdir, env, log_path)
        prepare_seconds = time.monotonic() - started
    for name, package in build.binaries:
        final = binary_path(name, build.version)
        if final.is_file():
            continue
        staging = final.parent.with_name(f".{final.parent.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        ldflags = " ".join(("-s", "-w", *build.ldflags))
        if build.recipe is versions.Recipe.WRAPPER:
            command = [go, "build", "-ldflags", ldflags, "-o", str(staging / name), package]
            measured = _run([*command], cwd=workdir, env=env, log_path=log_path, what=name)
        else:
            install_env = {**env, "GOBIN": str(staging)}
            command = [go, "install", "-ldflags", ldflags, f"{package}@{build.version}"]
            measured = _run(command, cwd=workdir, env=install_env, log_path=log_path, what=name)
            produced = staging / package.rsplit("/", 1)[-1]
            if produced != staging / name:
                produced.rename(staging / name)
        record = {
            "binary": name,
            "package": package,
            "version": build.version,
            "go": go_version,
            "wall_seconds": round(measured.wall_seconds, 1),
            "cpu_seconds": round(measured.cpu_seconds, 1),
            "wrapper_tidy_seconds": round(prepare_seconds, 1),
            "peak_rss_bytes": measured.peak_rss_bytes,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        prepare_seconds = 0.0  # counted once, with the first binary of the build
        shutil.rmtree(final.parent, ignore_errors=True)
        staging.rename(final.parent)
        logger.info(
            "built %s in %.0f s (%.0f CPU-s, peak RSS %.1f GiB) -> %s",
            name,
            measured.wall_seconds,
            measured.cpu_seconds,
            measured.peak_rss_bytes / 2**30,
            final,
        )


def build_records() -> list[dict[str, object]]:
    """The ``build.json`` of every cached binary, for ``warmstart cluster build --report``."""
    records: list[dict[str, object]] = []
    for path in sorted((cache_root() / "bin").glob("*/build.json")):
        records.append(json.loads(path.read_text()))
    return records


def _prepare_wrapper(
    go: str, build: versions.Build, workdir: pathlib.Path, env: Mapping[str, str], log_path: pathlib.Path
) -> None:
    """Write go.mod (require + pinned local replaces) and tools.go, then ``go mod tidy``."""
    marker = workdir / ".tidy-ok"
    wanted = "\n".join(sorted(build.packages)) + "\n"
    if marker.is_file() and marker.read_text() in ("", wanted):  # empty: written before packages were recorded
        return  # tidy already succeeded for this version and these packages
    info = json.loads(_output([go, "mod", "download", "-json", f"{build.module}@{build.version}"], workdir, env))
    upstream = json.loads(_output([go, "mod", "edit", "-json", info["GoMod"]], workdir, env))
    replaces = [
        f"-replace={r['Old']['Path']}={r['Old']['Path']}@{build.local_replace_version}"
        for r in upstream.get("Replace") or []
        if not r["New"].get("Version") and r["New"]["Path"].startswith(build.local_replace_prefix)
    ]
    replaces += _versioned_directives(upstream)
    (workdir / "go.mod").unlink(missing_ok=True)
    _output([go, "mod", "init", f"warmstart.local/{build.name}"], workdir, env)
    go_directive = upstream.get("Go") or ""
    edits = [f"-go={go_directive}"] if go_directive else []
    _output([go, "mod", "edit", *edits, f"-require={build.module}@{build.version}", *replaces], workdir, env)
    imports = "".join(f'\t_ "{package}"\n' for package in build.packages)
    tools = "//go:build tools\n\n// Package tools pins the commands this wrapper builds.\npackage tools\n\nimport (\n"
    (workdir / "tools.go").write_text(tools + imports + ")\n")
    _run([go, "mod", "tidy"], cwd=workdir, env=env, log_path=log_path, what=f"{build.name} go mod tidy")
    marker.write_text(wanted)


def _versioned_directives(upstream: Mapping[str, object]) -> list[str]:
    """``go mod edit`` flags that carry the module's versioned replaces and its excludes into the wrapper.

    Directives of a dependency's go.mod are ignored by Go, so the wrapper must restate them to build
    what upstream builds (KEDA, for one, replaces a module by a pseudo-version and excludes another).
    """
    flags: list[str] = []
    for replace in upstream.get("Replace") or []:  # type: ignore[attr-defined]
        old, new = replace["Old"], replace["New"]
        if not new.get("Version"):
            continue  # local replaces: pinned above, by prefix
        source = f"{old['Path']}@{old['Version']}" if old.get("Version") else old["Path"]
        flags.append(f"-replace={source}={new['Path']}@{new['Version']}")
    for exclude in upstream.get("Exclude") or []:  # type: ignore[attr-defined]
        flags.append(f"-exclude={exclude['Path']}@{exclude['Version']}")
    return flags


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOWORK"] = "off"  # a go.work of the caller must not leak into the wrappers
    env["GOFLAGS"] = " ".join(filter(None, [env.get("GOFLAGS", ""), "-buildvcs=false"]))
    return env


def _output(command: list[str], cwd: pathlib.Path, env: Mapping[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def _run(
    command: list[str], cwd: pathlib.Path, env: Mapping[str, str], log_path: pathlib.Path, what: str
) -> Measurement:
    """Run a long toolchain command, appending its output to ``log_path``, and measure it.

    Says every ``PROGRESS_SECONDS`` that ``what`` is still building, so a first build is never silent.
    """
    started = time.monotonic()
    next_report = started + PROGRESS_SECONDS
    with log_path.open("a") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(command, cwd=cwd, env=dict(env), stdout=log, stderr=subprocess.STDOUT)
        # wait4 reports the largest RSS of the child and of every descendant it waited for.
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() >= next_report:
                logger.info("  still building %s: %s elapsed", what, _minutes(time.monotonic() - started))
                next_report += PROGRESS_SECONDS
            time.sleep(0.5)
        process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - started
    if process.returncode != 0:
        tail = log_path.read_text()[-4000:]
        raise BuildError(f"{' '.join(command)} failed ({process.returncode}); see {log_path}:\n{tail}")
    return Measurement(
        wall_seconds=elapsed, peak_rss_bytes=usage.ru_maxrss * 1024, cpu_seconds=usage.ru_utime + usage.ru_stime
    )


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def _build_lock() -> contextlib.AbstractContextManager[None]:
    return locking.exclusive(cache_root() / "build.lock", "building the local cluster")
