"""Render the pre-pull DaemonSet of a ModelImageCache: pull the target image on every target node, then idle.

The pull trick works for images without a shell. The operator image ships a static busybox at NOOP_BINARY. The first
init container copies it into an emptyDir. The second init container runs the TARGET image with that copy as its
command (`busybox true`): the kubelet has to pull the image to start it, and the image's own entrypoint and shell are
never used. The main container idles (`busybox sleep`) in the operator image, so a Ready pod means "the image is on
this node". Every container runs as non-root with a read-only root filesystem and no capabilities.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from warmstart.api import GROUP
from warmstart.api.caches import MIC_KIND, ModelImageCacheSpec, NodeTargeting
from warmstart.render import keys, labels, owners, tolerations
from warmstart.render.context import RenderContext

Manifest = dict[str, Any]

#: static busybox in the operator image (the Dockerfile installs it; see docs/image-cache.md)
NOOP_BINARY = "/usr/local/bin/busybox"
#: where the copy lands, in every container of the pod (an emptyDir)
NOOP_DIR = "/warmstart-noop"
NOOP_COPY = f"{NOOP_DIR}/busybox"
#: the idle main container sleeps this long (about 68 years); kubelet kills it on pod deletion
SLEEP_SECONDS = "2147483647"
NON_ROOT_UID = 65532

COPY_CONTAINER = "copy-noop"
PULL_CONTAINER = "pull"
IDLE_CONTAINER = "idle"
VOLUME = "noop"
COMPONENT = "image-prepull"
#: the image cache key on the DaemonSet and its pods, so pods of MICs sharing a key (in any namespace) are found
IMAGE_KEY_LABEL = f"{GROUP}/image-cache-key"

_CANONICAL = re.compile(rf"^{re.escape(keys.image_cache_name(''))}([0-9a-f]{{{keys.KEY_LENGTH}}})$")
_LABEL_VALUE_MAX = 63


@dataclass(frozen=True)
class Owner:
    """The ModelImageCache a DaemonSet belongs to."""

    name: str
    namespace: str
    uid: str


def targeting_of(spec: ModelImageCacheSpec) -> NodeTargeting:
    """Only the node-targeting part of a MIC spec."""
    return NodeTargeting(
        node_selector=spec.node_selector, node_affinity=spec.node_affinity, tolerate_all_taints=spec.tolerate_all_taints
    )


def cache_key(name: str, spec: ModelImageCacheSpec) -> str:
    """The MIC's key: from its name when the endpoint controller named it `image-<key>`, else from its content."""
    match = _CANONICAL.match(name)
    return match.group(1) if match else keys.image_key(spec.image, targeting_of(spec))


def _shortened(value: str, limit: int) -> str:
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[: limit - 11].rstrip('.-_')}-{digest}"


def mic_label_value(name: str) -> str:
    """The value of MIC_LABEL for a MIC: its name, shortened with a hash when longer than a label value may be."""
    return _shortened(name, _LABEL_VALUE_MAX)


def daemonset_name(name: str) -> str:
    """`prepull-<key>` for endpoint-made MICs (`image-<key>`), `prepull-<name>` otherwise; at most 63 characters."""
    match = _CANONICAL.match(name)
    return _shortened(f"prepull-{match.group(1) if match else name}", _LABEL_VALUE_MAX)


def selector_labels(name: str) -> dict[str, str]:
    """The DaemonSet's (immutable) pod selector."""
    return {labels.MIC_LABEL: mic_label_value(name)}


def _pod_labels(name: str, key: str) -> dict[str, str]:
    return labels.managed({**selector_labels(name), IMAGE_KEY_LABEL: key, labels.COMPONENT: COMPONENT})


def _security_context() -> Manifest:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _resources() -> Manifest:
    return {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}}


def _container(name: str, image: str, pull_policy: str, command: list[str], read_only_mount: bool) -> Manifest:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": command,
        # an image's WORKDIR may not be readable by the non-root user; the emptyDir always is
        "workingDir": NOOP_DIR,
        "resources": _resources(),
        "securityContext": _security_context(),
        "volumeMounts": [{"name": VOLUME, "mountPath": NOOP_DIR, "readOnly": read_only_mount}],
    }


def _affinity(targeting: NodeTargeting) -> Manifest:
    """The targeting's required affinity, kept off control-plane nodes (a DaemonSet otherwise covers every node)."""
    required = (
        targeting.node_affinity.required_during_scheduling_ignored_during_execution if targeting.node_affinity else None
    )
    guarded = tolerations.exclude_control_plane(required.to_api() if required is not None else None)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": guarded}}


def pod_spec(spec: ModelImageCacheSpec, context: RenderContext) -> Manifest:
    """Pod spec: copy the no-op, run it from the target image, then idle."""
    body: Manifest = {
        "priorityClassName": context.prepull_priority_class,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # busybox sleep as PID 1 ignores SIGTERM; nothing to drain, so do not wait for it
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "runAsGroup": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [
            _container(
                COPY_CONTAINER,
                context.operator_image,
                context.image_pull_policy,
                [NOOP_BINARY, "cp", NOOP_BINARY, NOOP_COPY],
                False,
            ),
            _container(PULL_CONTAINER, spec.image, "IfNotPresent", [NOOP_COPY, "true"], True),
        ],
        "containers": [
            _container(
                IDLE_CONTAINER,
                context.operator_image,
                context.image_pull_policy,
                [NOOP_BINARY, "sleep", SLEEP_SECONDS],
                True,
            ),
        ],
        "volumes": [{"name": VOLUME, "emptyDir": {"sizeLimit": "16Mi"}}],
    }
    if spec.node_selector:
        body["nodeSelector"] = dict(spec.node_selector)
    body["affinity"] = _affinity(targeting_of(spec))
    if spec.tolerate_all_taints:
        body["tolerations"] = tolerations.cache_tolerations(context.extra_tolerations)
    if spec.image_pull_secrets:
        body["imagePullSecrets"] = [{"name": secret} for secret in spec.image_pull_secrets]
    return body


def daemonset(owner: Owner, spec: ModelImageCacheSpec, key: str, context: RenderContext) -> Manifest:
    """The pre-pull DaemonSet, controlled by its MIC (garbage collection removes it with the MIC)."""
    pod_labels = _pod_labels(owner.name, key)
    template_meta: Manifest = {"labels": pod_labels}
    if spec.pod_annotations:
        template_meta["annotations"] = dict(spec.pod_annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": daemonset_name(owner.name),
            "namespace": owner.namespace,
            "labels": dict(pod_labels),
            "ownerReferences": [owners.owner_reference(MIC_KIND, owner.name, owner.uid, controller=True)],
        },
        "spec": {
            "selector": {"matchLabels": selector_labels(owner.name)},
            # a template change (new operator image) restarts pods; the target image stays on the nodes
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
            "template": {"metadata": template_meta, "spec": pod_spec(spec, context)},
        },
    }
