"""The preload container and its volumes: one rendering for the per-node Job and the model pods' init container.

Both run the same program for the same job (fill `<hostPath>/warmstart` on one node, see api/preloading.py), so they
get the same rights, mounts, environment, resources and termination message; only the container's name and the
cache volume (its name, and an emptyDir in its place when a model pod does not cache) come from the pod.

- Non-root (uid/gid 65532) with every capability dropped, no privilege escalation, RuntimeDefault seccomp and a
  read-only root filesystem (security.CACHE_WRITER). Every pod that mounts the node cache (the Jobs, and model pods
  with caching on) hands the cache directory to that uid first (`ownership_container`, root with CAP_CHOWN only):
  a model pod on a cold node, which no Job has prepared, must be able to fill it.
- Writable: the cache directory `<hostPath>/warmstart` (through the CSI driver: only the key's tree in it,
  `<hostPath>/warmstart/keys/<key>`), mounted at the same path as on the node (so messages and logs name the node's
  paths), and an emptyDir at /tmp, which is also HOME. The volume is the admin's root itself
  (`type: Directory`: it must exist, the kubelet never creates it) and only its `warmstart` subPath is mounted; the
  kubelet creates that directory when it is missing (root-owned, without following links) and `ownership_container`
  gives a fresh, empty one to 65532.
- Read-only: a mounted source (the FSx claim of render/fsx.py, a kubernetesVolume claim) at /mnt/source, and the Hub
  token Secret.
- The pod's namespace and service account reach the preload through the downward API: the manifest records who
  downloaded the files, and a pod of another identity checks its access to, and the content of, every file before
  using them.
- The command is explicit, so a mirrored operator image with another entrypoint still works.
- Volumes the preload adds are prefixed `warmstart-`, so they cannot clash with the model volume a user names.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from warmstart.api import cachemanifests, preloading
from warmstart.api.sources import ModelSourceConfig, ModelSourceType
from warmstart.render import cache_volumes, fsx, security
from warmstart.render.context import RenderContext

Manifest = dict[str, Any]

TMP_VOLUME = "warmstart-tmp"
SOURCE_VOLUME = "warmstart-source"
HF_TOKEN_VOLUME = "warmstart-hf-token"
#: readable by the non-root preload without a pod-level fsGroup (which, in a model pod, belongs to the model server);
#: the volume is mounted only into the preload container, so no other container sees the file whatever its mode
HF_TOKEN_MODE = 0o444
#: the operator image's static busybox (see render/daemonsets.py)
BUSYBOX = "/usr/local/bin/busybox"
OWNERSHIP_CONTAINER = "warmstart-cache-owner"
#: give `<hostPath>/warmstart` ($1, the kubelet's subPath mount) to the cache uid: only the directory itself (never
#: recursive, `-h`), and only while it is fresh: a real directory, owned by root and empty (what the kubelet creates).
#: Anything else is refused (a clear message, exit 1): a directory someone else prepared is never handed over.
OWNERSHIP_SCRIPT = (
    f'd="$1"; u={security.CACHE_UID}:{security.CACHE_UID}; '
    f'refuse() {{ echo "warmstart-cache-owner: refusing $d: $1" | {BUSYBOX} tee /dev/termination-log >&2; exit 1; }}; '
    f'{{ [ -d "$d" ] && [ ! -L "$d" ]; }} || refuse "not a real directory"; '
    f'owner=$({BUSYBOX} stat -c %u:%g "$d") || refuse "cannot stat it"; '
    f'[ "$owner" = "$u" ] && exit 0; '
    f'[ "$owner" = 0:0 ] || refuse "owned by $owner, neither root (fresh) nor $u (warmstart)"; '
    f'[ -z "$({BUSYBOX} ls -A "$d")" ] || refuse "root-owned and not empty: not a fresh directory"; '
    f'{BUSYBOX} chown -h "$u" "$d"'
)
#: downloads stream to disk: small requests fit beside the GPU workload; the limit stops a runaway on a shared node
RESOURCES: dict[str, dict[str, str]] = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "4Gi"}}


@dataclass(frozen=True)
class Mounted:
    """A pod volume and the preload container's mount of it."""

    volume: Manifest
    mount: Manifest


@dataclass(frozen=True)
class Rendered:
    """The preload container, the init containers its pod runs before it, and the volumes (the cache volume first)."""

    container: Manifest
    volumes: list[Manifest]
    #: `warmstart-cache-owner` when the cache is the node's directory; nothing for an emptyDir
    owner_steps: list[Manifest]


def cache_volume(name: str, host_path: str, *, on_node: bool = True, csi_key: str | None = None) -> Mounted:
    """The node's `<hostPath>/warmstart`, or an emptyDir; mounted at that path.

    On the node: through the CSI driver, the tree of cache `csi_key` alone, writable, at
    `<hostPath>/warmstart/keys/<key>` (render/cache_volumes.py), or, without a key, as
    the admin's root (which must exist: `type: Directory`) of which only the subPath `warmstart` is mounted; the
    kubelet resolves and creates the subPath without following links (a link planted at `<hostPath>/warmstart` is
    refused).
    """
    path = preloading.cache_dir(host_path)
    if on_node and csi_key is not None:  # the driver binds the key's own tree, at the path it has on the node
        mount = {"name": name, "mountPath": preloading.key_dir(host_path, csi_key)}
        return Mounted(cache_volumes.csi_volume(name, csi_key, write=True), mount)
    if not on_node:
        return Mounted({"name": name, "emptyDir": {}}, {"name": name, "mountPath": path})
    volume = {"name": name, "hostPath": {"path": host_path.rstrip("/") or "/", "type": "Directory"}}
    return Mounted(volume, {"name": name, "mountPath": path, "subPath": preloading.CACHE_DIR_NAME})


def ownership_container(cache: Mounted, ctx: RenderContext) -> Manifest:
    """The init container that hands the node's cache directory to the non-root preload (root with CAP_CHOWN only).

    The same one runs first in the preload and cleanup Jobs and in model pods that cache, so a cold node's model pod
    can fill the directory its node's Job never prepared.
    """
    path = cache.mount["mountPath"]
    return {
        "name": OWNERSHIP_CONTAINER,
        "image": ctx.operator_image,
        "imagePullPolicy": ctx.image_pull_policy,
        "command": [BUSYBOX, "sh", "-c", OWNERSHIP_SCRIPT, "sh", path],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [dict(cache.mount)],
        "securityContext": copy.deepcopy(security.CACHE_OWNER),
    }


def _tmp_volume() -> Mounted:
    return Mounted({"name": TMP_VOLUME, "emptyDir": {}}, {"name": TMP_VOLUME, "mountPath": "/tmp"})


def source_volumes(source: ModelSourceConfig) -> list[Mounted]:
    """What the source needs mounted, chosen by modelSourceType: fsx or the PVC at /mnt/source, the Hub token Secret."""
    found: list[Mounted] = []
    source_mount = {"name": SOURCE_VOLUME, "mountPath": preloading.SOURCE_MOUNT, "readOnly": True}
    fsx_storage = fsx.storage_of(source)
    if fsx_storage is not None:  # the claim bound to the static PersistentVolume (render/fsx.py)
        found.append(Mounted(fsx.pod_volume(SOURCE_VOLUME, fsx_storage), source_mount))
    if source.model_source_type == ModelSourceType.KUBERNETES_VOLUME and source.kubernetes_volume:
        claim = {"claimName": source.kubernetes_volume.claim_name, "readOnly": True}
        found.append(Mounted({"name": SOURCE_VOLUME, "persistentVolumeClaim": claim}, source_mount))
    ref = source.hugging_face_model.token_secret_ref if source.hugging_face_model else None
    if preloading.has_hf_token(source) and ref is not None:
        secret = {"secretName": ref.name, "items": [{"key": ref.key, "path": "token"}], "defaultMode": HF_TOKEN_MODE}
        if ref.optional:
            secret["optional"] = True
        mount = {"name": HF_TOKEN_VOLUME, "mountPath": preloading.HF_TOKEN_DIR, "readOnly": True}
        found.append(Mounted({"name": HF_TOKEN_VOLUME, "secret": secret}, mount))
    return found


def preload_env(ctx: RenderContext) -> list[Manifest]:
    """The operator-wide preload variables: connection settings (the admin's mirror endpoints, proxies) as plain
    values no tenant can change, then the others as Secret references (their values never appear in a pod spec)."""
    return [
        *({"name": n, "value": v} for n, v in sorted(ctx.preload_endpoints.items())),
        *(
            {"name": n, "valueFrom": {"secretKeyRef": {"name": ctx.preload_env_secret, "key": n}}}
            for n in sorted(ctx.preload_env_names)
        ),
    ]


def _identity_env() -> list[Manifest]:
    """The pod's own namespace and service account (downward API): recorded in, and checked against, the manifest;
    and its uid, which names its proof result for the CSI driver."""
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}}
        for name, field in (
            (cachemanifests.NAMESPACE_ENV, cachemanifests.NAMESPACE_FIELD),
            (cachemanifests.SERVICE_ACCOUNT_ENV, cachemanifests.SERVICE_ACCOUNT_FIELD),
            (preloading.POD_UID_ENV, preloading.POD_UID_FIELD),
        )
    ]


def render(
    name: str, args: Sequence[str], cache: Mounted, source: ModelSourceConfig | None, ctx: RenderContext
) -> Rendered:
    """The container `name` running `warmstart <args>` with the cache, /tmp and (given a source) its volumes.

    With the node's cache directory, also the `warmstart-cache-owner` step the pod must run before it.
    """
    mounted = [cache, _tmp_volume(), *(source_volumes(source) if source is not None else [])]
    container: Manifest = {
        "name": name,
        "image": ctx.operator_image,
        "imagePullPolicy": ctx.image_pull_policy,
        "command": [preloading.COMMAND],
        "args": list(args),
        "env": [{"name": "HOME", "value": "/tmp"}, *_identity_env(), *preload_env(ctx)],
        "resources": {kind: dict(values) for kind, values in RESOURCES.items()},
        "volumeMounts": [m.mount for m in mounted],
        "terminationMessagePath": preloading.TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "securityContext": copy.deepcopy(security.CACHE_WRITER),
    }
    owner_steps = [ownership_container(cache, ctx)] if "hostPath" in cache.volume else []
    return Rendered(container=container, volumes=[m.volume for m in mounted], owner_steps=owner_steps)
