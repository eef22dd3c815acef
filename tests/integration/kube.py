"""Small helpers for integration tests: kubectl against the real cluster, CRD installation and polling."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from warmstart.localcluster import kubeconfigs

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def kubectl(
    kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run kubectl; with check=False the caller inspects returncode and stderr."""
    result = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result


def apply(
    kubeconfig: str, manifest: dict[str, Any] | str, namespace: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    return kubectl(kubeconfig, *args, stdin=text, check=check)


def get(kubeconfig: str, resource: str, name: str, namespace: str) -> dict[str, Any] | None:
    result = kubectl(kubeconfig, "get", resource, name, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    value: dict[str, Any] = json.loads(result.stdout)
    return value


GROUP, VERSION = "inference.sagemaker.aws.amazon.com", "v1"
PLURALS = {
    "InferenceEndpointConfig": "inferenceendpointconfigs",
    "JumpStartModel": "jumpstartmodels",
    "ModelDataCacheConfig": "modeldatacacheconfigs",
    "ModelImageCache": "modelimagecaches",
}


def create_custom(api: Any, manifest: dict[str, Any]) -> str:
    """Create a warmstart object from its manifest; returns its name."""
    from kubernetes import client

    meta = manifest["metadata"]
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURALS[manifest["kind"]], manifest
    )
    return str(meta["name"])


def get_custom(api: Any, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
    """A warmstart object, or None when it does not exist."""
    from kubernetes import client

    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name
        )
        return found
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


#: the InferencePool CRD as the chart ships it (gatewayInference.installInferencePoolCRD)
INFERENCE_POOL_CRD = ROOT / "charts" / "warmstart" / "files" / "inference.networking.k8s.io_inferencepools.yaml"


def install_crds(kubeconfig: str) -> None:
    """Apply crds/ and the chart's InferencePool CRD server-side and wait until every CRD is Established."""
    for path in (ROOT / "crds", INFERENCE_POOL_CRD):
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(path))
        kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(path))


def wait_for(probe: Callable[[], T | None], timeout: float = 90.0, interval: float = 0.5, what: str = "condition") -> T:
    """Poll until `probe` returns something truthy; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def seed_manifest() -> dict[str, Any]:
    """The seed InferenceEndpointConfig from ARCHITECTURE.md, verbatim."""
    text = (ROOT / "examples" / "01-seed" / "inference-endpoint-config.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def service_account_kubeconfig(api: Any, admin: Path, namespace: str, name: str, out: Path) -> Path:
    """A kubeconfig authenticating as a ServiceAccount (TokenRequest API), so RBAC applies as it would in-cluster."""
    from kubernetes import client

    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(name, namespace, {"spec": {"expirationSeconds": 3600}})
        .status.token
    )
    out.write_text(yaml.safe_dump(kubeconfigs.with_token(admin, name, token, namespace)))
    return out


#: the API server's finalizer on a CRD: it deletes the CRD's objects first
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def delete_crds(kubeconfig: str, paths: list[str], timeout: float = 60.0) -> list[str]:
    """Delete the CRDs in `paths` once their objects are gone; returns the ones whose cleanup had to be finished.

    The API server's CRD finalizer can stay stuck on "could not list instances: storage is (re)initializing" when a
    CRD is deleted soon after it was (re)applied (seen with kube-apiserver 1.37), and `kubectl delete --wait` then
    hangs. When no object of a stuck CRD is left, its finalizer has nothing to do, so it is removed.
    """
    files = [a for p in paths for a in ("-f", p)]
    names = [str(doc["metadata"]["name"]) for p in paths for doc in yaml.safe_load_all(Path(p).read_text()) if doc]
    kubectl(kubeconfig, "delete", "--ignore-not-found", "--wait=false", *files)
    deadline = time.monotonic() + timeout
    left = names
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = [n for n in left if kubectl(kubeconfig, "get", "crd", n, check=False).returncode == 0]
    finished = []
    for name in left:
        crd = yaml.safe_load(kubectl(kubeconfig, "get", "crd", name, "-o", "yaml").stdout)
        plural = f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        objects = kubectl(kubeconfig, "get", plural, "-A", "-o", "name", check=False)
        if objects.returncode == 0 and objects.stdout.strip():
            raise AssertionError(f"CRD {name} is stuck deleting with objects left: {objects.stdout.strip()}")
        finalizers = [f for f in crd["metadata"].get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER]
        patch = json.dumps({"metadata": {"finalizers": finalizers or None}})
        kubectl(kubeconfig, "patch", "crd", name, "--type=merge", "-p", patch, check=False)
        finished.append(name)
    return finished
