"""Compute a ModelImageCache's status from its DaemonSet and pre-pull pods (pure: pods in, status out).

States, with `target` = DaemonSet desiredNumberScheduled and `ready` = numberReady:
- Pending: no target node yet (none matches, or the DaemonSet controller has not counted them yet);
- Ready: every target node has a Ready pre-pull pod;
- Downloading: some target node is still pulling (or waiting to be scheduled);
- Failed: no node is ready and every non-ready node reports a pull error;
- PartiallyReady: some nodes are ready and every other one reports a pull error.
The kubelet keeps retrying failed pulls, so Failed and PartiallyReady can still turn into Ready.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from warmstart.api.caches import ImagePullFailure, ModelImageCacheSpec, ModelImageCacheStatus
from warmstart.api.states import CacheState, ConditionType
from warmstart.render import conditions, daemonsets, labels

#: waiting reasons of a container whose image cannot be pulled
PULL_ERRORS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "ErrRegistryUnavailable",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
#: waiting reasons of a container that was pulled but cannot start (reported too: the pod never gets Ready)
START_ERRORS = frozenset(
    {"CrashLoopBackOff", "CreateContainerError", "CreateContainerConfigError", "RunContainerError"}
)
#: status.failures keeps at most this many nodes (the message gives the total)
MAX_FAILURES = 20
_MESSAGE_NODES = 3


class Reason(StrEnum):
    """Reasons of the Ready condition."""

    ALL_NODES_READY = "AllNodesReady"
    PULLING = "Pulling"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    PARTIALLY_READY = "PartiallyReady"
    NO_TARGET_NODES = "NoTargetNodes"
    WAITING_FOR_DAEMON_SET = "WaitingForDaemonSet"


@dataclass(frozen=True)
class ContainerError:
    """A container of a pre-pull pod waiting with an error reason."""

    container: str
    image: str
    reason: str
    message: str


@dataclass(frozen=True)
class PrepullPod:
    """What status and node labels need from one pre-pull pod."""

    name: str
    namespace: str
    mic: str
    key: str
    node: str | None
    ready: bool
    deleting: bool
    errors: tuple[ContainerError, ...] = ()
    image_id: str | None = None

    @property
    def warm(self) -> bool:
        """The image is on the node: the pod is Ready (init containers done) and not going away."""
        return self.ready and not self.deleting and self.node is not None


def _node_of(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    # DaemonSet pods are pinned by a required matchFields term before they are bound
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return None


def _errors(statuses: Iterable[Mapping[str, Any]]) -> list[ContainerError]:
    found = []
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PULL_ERRORS or reason in START_ERRORS:
            found.append(
                ContainerError(
                    str(status.get("name", "")),
                    str(status.get("image", "")),
                    str(reason),
                    str(waiting.get("message") or ""),
                )
            )
    return found


def prepull_pod(pod: Mapping[str, Any]) -> PrepullPod:
    """Read a pre-pull pod body."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    pod_labels = meta.get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    inits = status.get("initContainerStatuses") or []
    image_id = next(
        (s.get("imageID") for s in inits if s.get("name") == daemonsets.PULL_CONTAINER and s.get("imageID")), None
    )
    return PrepullPod(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        mic=str(pod_labels.get(labels.MIC_LABEL, "")),
        key=str(pod_labels.get(daemonsets.IMAGE_KEY_LABEL, "")),
        node=_node_of(pod),
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        errors=tuple(_errors([*inits, *(status.get("containerStatuses") or [])])),
        image_id=str(image_id) if image_id else None,
    )


def digest_of(image_id: str) -> str | None:
    """`sha256:...` from a container status imageID (`repo@sha256:...`, `docker-pullable://...`, or a bare digest)."""
    if "@" in image_id:
        return image_id.rsplit("@", 1)[1]
    return image_id if image_id.startswith("sha256:") else None


def failures(pods: Iterable[PrepullPod]) -> list[ImagePullFailure]:
    """One failure per node whose pod is not Ready and waits on an error, by node name; the message names the image."""
    by_node: dict[str, ImagePullFailure] = {}
    for pod in pods:
        if pod.ready or pod.deleting or not pod.errors or pod.node is None:
            continue
        error = pod.errors[0]
        message = error.message or error.reason
        if error.image and error.image not in message:
            message = f"{error.image}: {message}"
        by_node[pod.node] = ImagePullFailure(node=pod.node, reason=error.reason, message=message)
    return [by_node[node] for node in sorted(by_node)]


def _digest(pods: Sequence[PrepullPod], previous: str | None) -> tuple[str | None, bool]:
    seen = Counter(d for d in (digest_of(p.image_id) for p in pods if p.image_id) if d)
    if not seen:
        return previous, False
    return seen.most_common(1)[0][0], len(seen) > 1


def _summary(found: Sequence[ImagePullFailure]) -> str:
    named = ", ".join(f"{f.reason} on {f.node}" for f in found[:_MESSAGE_NODES])
    more = len(found) - _MESSAGE_NODES
    return f"{named} and {more} more" if more > 0 else named


def _state(target: int, ready: int, failing: int, observed: bool, image: str) -> tuple[CacheState, Reason, str]:
    if target == 0:
        if not observed:
            return CacheState.PENDING, Reason.WAITING_FOR_DAEMON_SET, "waiting for the DaemonSet controller"
        return CacheState.PENDING, Reason.NO_TARGET_NODES, "no node matches the targeting"
    if ready >= target:
        return CacheState.READY, Reason.ALL_NODES_READY, f"{image} is on all {target} target nodes"
    if failing and failing >= target - ready:
        if ready:
            return (
                CacheState.PARTIALLY_READY,
                Reason.PARTIALLY_READY,
                f"{image} is on {ready}/{target} nodes; the pull fails on {failing}",
            )
        return CacheState.FAILED, Reason.IMAGE_PULL_FAILED, f"pulling {image} fails on every target node ({target})"
    return CacheState.DOWNLOADING, Reason.PULLING, f"pulling {image}: {ready}/{target} nodes ready"


def image_status(
    spec: ModelImageCacheSpec,
    key: str,
    generation: int | None,
    daemonset: Mapping[str, Any] | None,
    pods: Sequence[PrepullPod],
    previous: ModelImageCacheStatus | None,
    now: str,
) -> ModelImageCacheStatus:
    """The MIC status; conditions keep their lastTransitionTime unless they flip."""
    ds_status = (daemonset or {}).get("status") or {}
    target = int(ds_status.get("desiredNumberScheduled") or 0)
    ready = int(ds_status.get("numberReady") or 0)
    observed = ds_status.get("observedGeneration") is not None
    found = failures(pods)
    state, reason, message = _state(target, ready, len(found), observed, spec.image)
    if found:
        message = f"{message}; {_summary(found)}"
    digest, mixed = _digest(pods, previous.resolved_digest if previous else None)
    if mixed:
        message = f"{message}; nodes hold different digests of a mutable tag"
    ready_condition = conditions.condition(ConditionType.READY, state == CacheState.READY, reason, message, generation)
    merged = conditions.set_condition((previous.conditions or []) if previous else [], ready_condition, now)
    return ModelImageCacheStatus(
        state=state,
        ready_nodes=ready,
        target_nodes=target,
        message=message,
        conditions=merged,
        observed_generation=generation,
        key=key,
        image=spec.image,
        resolved_digest=digest,
        failures=found[:MAX_FAILURES] or None,
    )
