"""The chart with `cache.access: csi`: the CSIDriver object, the driver's DaemonSet, its read-only RBAC, and one
signing key shared by the operator and the driver (real helm, like test_chart.py)."""

from __future__ import annotations

import pathlib
from typing import Any

from test_chart import by_kind, documents, template

from warmstart.controllers import settings as settings_module
from warmstart.render import cache_volumes

CSI_VALUES: dict[str, Any] = {
    "cache": {"access": "csi", "allowedHostPaths": ["/opt/dlami/nvme", "/mnt/cache"]},
    "csi": {"kubeletDir": "/var/lib/k8s/kubelet"},
    "cacheSharing": {"namespaceGroups": {"ml": ["team-a", "team-b"]}},
}


def _container_env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_driver_is_the_only_privileged_pod_and_registers_under_the_kubelet_dir(
    helm: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    docs = documents(template(helm, CSI_VALUES, tmp_path))
    (driver,) = by_kind(docs, "CSIDriver")
    assert driver["metadata"]["name"] == cache_volumes.DRIVER
    assert driver["spec"] == {
        "attachRequired": False,
        "podInfoOnMount": True,
        "volumeLifecycleModes": ["Ephemeral"],
        "fsGroupPolicy": "None",
        "requiresRepublish": False,
    }
    (daemonset,) = by_kind(docs, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    assert container["args"] == [
        "csi",
        "--csi-socket=/var/lib/k8s/kubelet/plugins/warmstart-csi/csi.sock",
        "--registration-socket=/var/lib/k8s/kubelet/plugins_registry/warmstart-csi-reg.sock",
    ]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/k8s/kubelet/pods"]["mountPropagation"] == "Bidirectional"
    assert {"/opt/dlami/nvme", "/mnt/cache"} <= set(mounts)
    (deployment,) = by_kind(docs, "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "privileged" not in operator["securityContext"]
    # one key, from one Secret, for the operator (which signs) and the driver (which checks)
    key_ref = {"secretKeyRef": {"name": "warmstart-csi", "key": "job-signing-key"}}
    assert _container_env(operator)["WARMSTART_JOB_SIGNING_KEY"] == key_ref
    assert _container_env(container)["WARMSTART_JOB_SIGNING_KEY"] == key_ref
    (secret,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "warmstart-csi"]
    assert len(secret["data"]["job-signing-key"]) >= 48
    # the driver decides with the operator's roots and trust groups
    assert _container_env(container)["WARMSTART_ALLOWED_HOST_PATHS"] == '["/opt/dlami/nvme","/mnt/cache"]'
    assert _container_env(container)["WARMSTART_CACHE_SHARING_GROUPS"] == '{"ml":["team-a","team-b"]}'
    env = {k: v for k, v in _container_env(operator).items() if isinstance(v, str)}
    settings = settings_module.from_env({**env, "WARMSTART_JOB_SIGNING_KEY": "from-the-secret-" * 3})
    assert settings.render.cache_access == cache_volumes.CacheAccess.CSI


def test_the_driver_reads_pods_jobs_and_caches_and_nothing_else(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = documents(template(helm, CSI_VALUES, tmp_path))
    (role,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "warmstart-csi"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
        {
            "apiGroups": ["inference.sagemaker.aws.amazon.com"],
            "resources": ["modeldatacacheconfigs"],
            "verbs": ["list"],
        },
    ]


def test_hostpath_access_installs_no_driver(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    docs = documents(template(helm, {"cache": {"access": "hostPath"}}, tmp_path))
    assert by_kind(docs, "CSIDriver") == [] and by_kind(docs, "DaemonSet") == []


def test_an_admins_signing_key_secret_makes_the_render_repeatable(helm: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Argo CD renders without helm's lookup: the chart's generated key would change on every sync, so that the
    operator (which signs) and the driver (which checks) could restart with different keys. The admin's Secret fixes
    it."""
    values = {**CSI_VALUES, "csi": {"signingKeySecret": "my-signing-key"}}
    first, second = template(helm, values, tmp_path), template(helm, values, tmp_path)
    assert first == second
    docs = documents(first)
    assert [
        s
        for s in by_kind(docs, "Secret")
        if s["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "csi"
    ] == []
    (deployment,) = by_kind(docs, "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    (daemonset,) = by_kind(docs, "DaemonSet")
    (driver,) = daemonset["spec"]["template"]["spec"]["containers"]
    key_ref = {"secretKeyRef": {"name": "my-signing-key", "key": "job-signing-key"}}
    assert _container_env(operator)["WARMSTART_JOB_SIGNING_KEY"] == key_ref
    assert _container_env(driver)["WARMSTART_JOB_SIGNING_KEY"] == key_ref
