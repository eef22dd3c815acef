"""KEDA for the local cluster: its CRDs from the pinned Go module, and how to run its operator as a host process.

The CRDs come from the same module version the operator binary is built from (`versions.KEDA`), so what tests validate
ScaledObjects against is what that KEDA serves. Nothing is downloaded but the module itself (`go mod download`, cached).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
from collections.abc import Mapping

from warmstart.localcluster import building, versions

#: the CRDs warmstart's tests install (ScaledObject, and the kinds KEDA's operator watches at start)
CRD_FILES = (
    "keda.sh_scaledobjects.yaml",
    "keda.sh_scaledjobs.yaml",
    "keda.sh_triggerauthentications.yaml",
    "keda.sh_clustertriggerauthentications.yaml",
    "eventing.keda.sh_cloudeventsources.yaml",
    "eventing.keda.sh_clustercloudeventsources.yaml",
)


def module_dir() -> pathlib.Path:
    """The extracted KEDA module of the pinned version (downloaded into the Go module cache once)."""
    go = shutil.which("go")
    if go is None:
        raise building.BuildError("`go` is not on PATH: it fetches KEDA's CRDs from the KEDA Go module")
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{versions.KEDA_BUILD.module}@{versions.KEDA}"],
        capture_output=True,
        text=True,
        check=False,
        env=building.go_env(),
        cwd=building.cache_root(),
    )
    if done.returncode != 0:
        raise building.BuildError(f"go mod download of KEDA {versions.KEDA} failed:\n{done.stderr[-2000:]}")
    return pathlib.Path(json.loads(done.stdout)["Dir"])


def crd_paths() -> list[pathlib.Path]:
    """KEDA's CRD manifests (config/crd/bases of the module)."""
    bases = module_dir() / "config" / "crd" / "bases"
    return [bases / name for name in CRD_FILES]


def binary() -> pathlib.Path:
    """The KEDA operator binary, built (once, cached by version) when missing."""
    building.ensure(versions.AUTOSCALING)
    return building.binary_path("keda", versions.KEDA)


def operator_command(kubeconfig: pathlib.Path, cert_dir: pathlib.Path, ports: Mapping[str, int]) -> list[str]:
    """The KEDA operator's command line for a host process: no leader election, ports of the caller's choosing.

    `cert_dir` holds ca.crt, tls.crt and tls.key for KEDA's gRPC metrics service (the local cluster's PKI will do).
    """
    return [
        str(binary_path()),
        f"--kubeconfig={kubeconfig}",
        f"--cert-dir={cert_dir}",
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
        f"--metrics-service-bind-address=127.0.0.1:{ports['grpc']}",
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
        "--leader-elect=false",
        "--zap-log-level=info",
    ]


def operator_env(namespace: str) -> dict[str, str]:
    """Environment of the host KEDA operator: all namespaces watched, its own objects in `namespace`."""
    return {"WATCH_NAMESPACE": "", "KEDA_CLUSTER_OBJECT_NAMESPACE": namespace, "POD_NAMESPACE": namespace}


def binary_path() -> pathlib.Path:
    return building.binary_path("keda", versions.KEDA)
