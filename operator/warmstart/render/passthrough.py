"""Pass-through rules: what `kubernetes.volumes` and `kubernetes.initContainers` may put into a model pod.

Both are core/v1 objects a tenant writes and warmstart renders into the model pod as they are. Pod Security (checked
on the real API server before anything is applied, controllers/guarding.py) filters them like any pod the tenant
creates; these rules add what Pod Security cannot know:

- a `hostPath` volume must be a normalized absolute path (no empty, `.` or `..` segment, no trailing `/`) strictly
  under a root the cluster admin allows (Helm value `cache.allowedHostPaths`), and outside warmstart's own cache
  directories (`<root>/.../warmstart`), whose per-namespace isolation a direct mount would bypass;
- every container that mounts a `hostPath` volume mounts it `readOnly: true`: a tenant never writes a node directory;
- an init container runs at most at Pod Security `baseline`, whatever the namespace's level: no `privileged`, no
  capability beyond baseline's, no host port, no `Unconfined` seccomp or AppArmor profile, no `procMount` but
  `Default`, no `hostProcess`, no SELinux user, role or type outside baseline's. A namespace may be `privileged` for
  other reasons (the `hostPath` cache access needs it); an endpoint never turns that into node root;
- the same profiles in the legacy annotations of `kubernetes.annotations`, which the pod gets as written (AppArmor
  `container.apparmor.security.beta.kubernetes.io/<container>`, seccomp
  `container.seccomp.security.alpha.kubernetes.io/<container>` and `seccomp.security.alpha.kubernetes.io/pod`; the
  kubelet and the API server still honour them): a profile beyond baseline may name the model server container
  only (which runs as its image needs, at the namespace's level), never an init container passed through nor one of
  warmstart's own; the pod's seccomp annotation is refused beyond baseline when init containers are passed through.

The chart's ValidatingAdmissionPolicy (`<release>-pass-through`, charts/warmstart/templates/admission.yaml) applies
the same rules at admission; the operator applies them again, so an object that got past admission (policy not
installed, or roots changed since) is still refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from warmstart.api.preloading import CACHE_DIR_NAME
from warmstart.render import hostpaths
from warmstart.render.endpoints import Endpoint

#: the status reason of an endpoint whose pass-through volumes break these rules (the cache roots' reason too)
REASON = hostpaths.REASON
#: the status reason of an endpoint whose pass-through init containers go beyond Pod Security baseline
INIT_REASON = "InitContainerBeyondBaseline"
#: HyperPod's reason for a kubernetesVolume source without the volume it names
VOLUME_REASON = "KubernetesVolumeValidationFailed"


def host_path_refusal(path: object, roots: Sequence[str]) -> str | None:
    """Why a tenant's hostPath `path` is refused (None when allowed)."""
    allowed = ", ".join(roots) or "(none)"
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or (path != "/" and any(segment in ("", ".", "..") for segment in path.split("/")[1:]))
    ):
        return f"hostPath {path!r} must be a normalized absolute path (no empty, '.' or '..' segment, no trailing '/')"
    under = [root for root in roots if path.startswith(root.rstrip("/") + "/")]
    if not under:
        return f"hostPath {path} is not under an allowed root ({allowed}; Helm value cache.allowedHostPaths)"
    below = path[len(under[0].rstrip("/")) :].split("/")
    if CACHE_DIR_NAME in below:
        return (
            f"hostPath {path} is inside warmstart's cache ({CACHE_DIR_NAME}/): caches reach pods only through warmstart"
        )
    return None


#: the capabilities Pod Security baseline lets a container add
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: the SELinux types Pod Security baseline allows
BASELINE_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
_CAP = (
    "an init container passed through an endpoint runs at most at Pod Security baseline, whatever the namespace's level"
)


#: the model pod's model server container, the one container a legacy profile annotation may loosen
MODEL_SERVER_CONTAINER = "worker"
#: the legacy annotation that sets one container's AppArmor profile (the kubelet still reads it)
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
#: the legacy annotations that set one container's and the pod's seccomp profile (copied into the fields on create)
SECCOMP_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
#: what Pod Security baseline allows in them (an AppArmor annotation may also be empty)
_APPARMOR_ALLOWED = "runtime/default or localhost/*"
_SECCOMP_ALLOWED = "runtime/default, docker/default or localhost/*"


def _within_baseline(key: str, value: str) -> bool:
    apparmor = key.startswith(APPARMOR_ANNOTATION_PREFIX)
    exact = ("", "runtime/default") if apparmor else ("runtime/default", "docker/default")
    return value in exact or value.startswith("localhost/")


def _profiled_container(key: str) -> str | None:
    """The container a legacy profile annotation names ('' for the pod's), None for any other annotation."""
    if key == SECCOMP_POD_ANNOTATION:
        return ""
    for prefix in (APPARMOR_ANNOTATION_PREFIX, SECCOMP_ANNOTATION_PREFIX):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def annotation_refusals(endpoint: Endpoint) -> list[str]:
    """Every legacy AppArmor or seccomp annotation in `kubernetes.annotations` that takes a container other than the
    model server beyond Pod Security baseline, naming the annotation; [] when none."""
    kube = endpoint.kubernetes
    annotations = (kube.annotations if kube else None) or {}
    passed_through = bool(kube and kube.init_containers)
    found: list[str] = []
    for key, value in sorted(annotations.items()):
        container = _profiled_container(key)
        if container is None or container == MODEL_SERVER_CONTAINER or _within_baseline(key, value):
            continue
        if container == "" and not passed_through:  # warmstart's containers set their own: the model server's alone
            continue
        allowed = _APPARMOR_ALLOWED if key.startswith(APPARMOR_ANNOTATION_PREFIX) else _SECCOMP_ALLOWED
        applies = (
            "the pod's profile applies to the init containers passed through"
            if container == ""
            else f"only the model server container ({MODEL_SERVER_CONTAINER}) may have it"
        )
        found.append(f"kubernetes.annotations[{key}]: {value!r} is beyond baseline ({allowed}); {applies}: {_CAP}")
    return found


def _profile_unconfined(context: Mapping[str, Any], field: str) -> bool:
    profile = context.get(field)
    return isinstance(profile, Mapping) and profile.get("type") == "Unconfined"


def init_container_breaches(container: Mapping[str, Any]) -> list[str]:
    """What in one pass-through init container goes beyond Pod Security baseline, each naming its field; [] when
    nothing does. A stricter namespace level is Pod Security's own to enforce (the dry run, controllers/guarding.py)."""
    found: list[str] = []
    context = container.get("securityContext")
    context = context if isinstance(context, Mapping) else {}
    if context.get("privileged") is True:
        found.append("securityContext.privileged")
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, Mapping) else None
    beyond = sorted({str(c) for c in added or []} - BASELINE_CAPABILITIES) if isinstance(added, list) else []
    if beyond:
        found.append(f"securityContext.capabilities.add {', '.join(beyond)}")
    for field in ("seccompProfile", "appArmorProfile"):
        if _profile_unconfined(context, field):
            found.append(f"securityContext.{field}.type Unconfined")
    if context.get("procMount") not in (None, "Default"):
        found.append(f"securityContext.procMount {context.get('procMount')}")
    windows = context.get("windowsOptions")
    if isinstance(windows, Mapping) and windows.get("hostProcess") is True:
        found.append("securityContext.windowsOptions.hostProcess")
    selinux = context.get("seLinuxOptions")
    if isinstance(selinux, Mapping) and (
        selinux.get("user") or selinux.get("role") or str(selinux.get("type") or "") not in BASELINE_SELINUX_TYPES
    ):
        found.append("securityContext.seLinuxOptions")
    ports = container.get("ports")
    if isinstance(ports, list) and any(isinstance(p, Mapping) and p.get("hostPort") for p in ports):
        found.append("ports[].hostPort")
    return found


def _host_volumes(volumes: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(v.get("name")) for v in volumes if isinstance(v, Mapping) and "hostPath" in v}


def refusals(endpoint: Endpoint, roots: Sequence[str]) -> list[str]:
    """Every breach of the rules by the endpoint's `kubernetes` block, each naming its field; [] when none."""
    kube = endpoint.kubernetes
    if kube is None:
        return []
    volumes = kube.volumes or []
    found: list[str] = []
    for index, volume in enumerate(volumes):
        host = volume.get("hostPath") if isinstance(volume, Mapping) else None
        if host is None:
            continue
        path = host.get("path") if isinstance(host, Mapping) else None
        why = host_path_refusal(path, roots)
        if why is not None:
            found.append(f"kubernetes.volumes[{index}] ({volume.get('name')}): {why}")
    host_volumes = _host_volumes(volumes)
    for index, container in enumerate(kube.init_containers or []):
        for position, mount in enumerate(container.get("volumeMounts") or []):
            if isinstance(mount, Mapping) and mount.get("name") in host_volumes and mount.get("readOnly") is not True:
                found.append(
                    f"kubernetes.initContainers[{index}] ({container.get('name')}).volumeMounts[{position}]: "
                    f"hostPath volume {mount.get('name')} must be mounted readOnly: true"
                )
    return found


def init_container_refusals(endpoint: Endpoint) -> list[str]:
    """Every pass-through init container that goes beyond Pod Security baseline, naming its fields, then every
    annotation that would take one there (`annotation_refusals`); [] when none."""
    kube = endpoint.kubernetes
    found: list[str] = []
    for index, container in enumerate((kube.init_containers if kube else None) or []):
        breaches = init_container_breaches(container)
        if breaches:
            found.append(f"kubernetes.initContainers[{index}] ({container.get('name')}): {'; '.join(breaches)}: {_CAP}")
    return found + annotation_refusals(endpoint)


def missing_model_volume(endpoint: Endpoint) -> str | None:
    """Why a kubernetesVolume source without a claim has no model volume (None when `kubernetes.volumes` has it)."""
    if not endpoint.model_on_volume:
        return None
    name = endpoint.worker.model_volume_mount.name
    volumes = (endpoint.kubernetes.volumes or []) if endpoint.kubernetes else []
    if any(isinstance(v, Mapping) and v.get("name") == name for v in volumes):
        return None
    return (
        f"modelSourceType kubernetesVolume without kubernetesVolume reads the model from the kubernetes.volumes entry "
        f"named {name} (worker.modelVolumeMount.name), and there is none"
    )
