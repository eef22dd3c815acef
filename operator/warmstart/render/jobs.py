"""The per-node Jobs of a weights cache: render the preload and cleanup Jobs, and read a Job and its pod back.

Choices (docs/weights-cache.md explains them for users):
- Pinned with a required node affinity on `metadata.name`, not `spec.nodeName`, so the scheduler still checks the
  node's capacity and the pod waits instead of failing when the node is full (the DaemonSet controller does the same).
- `restartPolicy: Never` so every attempt leaves a pod with its own termination message, and a `podFailurePolicy`
  that fails the Job at once on the preload's permanent exit codes (retrying NotFound is pointless) while pod
  disruptions (drain, preemption) do not count against `backoffLimit`.
- The container is the one the model pods' init container also runs (preload_containers.py): non-root (65532)
  without capabilities on a read-only root filesystem, writing only `<hostPath>/warmstart` (not the whole NVMe) and
  `/tmp`. Before it, `warmstart-cache-owner` (root with CAP_CHOWN only) creates that directory and hands it to 65532.
- No service-account token is mounted: the preload never calls the Kubernetes API (IRSA / Pod Identity inject their
  own token volume).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warmstart.api import API_VERSION, GROUP, preloading
from warmstart.api.caches import MDCC_KIND, ModelDataCacheConfigSpec
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import cache_volumes, labels, names, owners, preload_containers, tolerations
from warmstart.render.context import RenderContext
from warmstart.render.weights_plans import JobPhase, PreloadJob, PreloadResult

Manifest = dict[str, Any]

CONTAINER = "preload"
ROLE_PRELOAD = "preload"
ROLE_CLEANUP = "cleanup"
ATTEMPT_LABEL = f"{GROUP}/attempt"
GENERATION_ANNOTATION = f"{GROUP}/generation"
OWNER_UID_ANNOTATION = f"{GROUP}/model-data-cache-uid"

CACHE_VOLUME = "cache"

#: the cleanup Job is bounded: it deletes one directory
CLEANUP_DEADLINE_SECONDS = 600
CLEANUP_BACKOFF_LIMIT = 1
CLEANUP_TTL_SECONDS = 600


@dataclass(frozen=True)
class Owner:
    """The cache a Job belongs to."""

    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class PreloadRequest:
    """One preload attempt of one cache on one node."""

    owner: Owner
    key: str
    node: str
    attempt: int
    generation: int
    expected_bytes: int | None = None


def _node_hash(node: str) -> str:
    return hashlib.sha1(node.encode()).hexdigest()[:8]


#: a manifest digest as the preload reports it
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def preload_job_name(key: str, node: str, attempt: int) -> str:
    """`preload-<key>-<sha1(node)[:8]>-<attempt>`: deterministic, at most 40 characters."""
    return f"preload-{key}-{_node_hash(node)}-{attempt}"


def cleanup_job_name(key: str, node: str) -> str:
    """`cleanup-<key>-<sha1(node)[:8]>`: one per cache and node."""
    return f"cleanup-{key}-{_node_hash(node)}"


def _labels(owner: Owner, node: str, role: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return labels.managed(
        {
            labels.MDCC_LABEL: names.label_value(owner.name),
            labels.NODE_LABEL: node,
            labels.ROLE_LABEL: role,
            **(extra or {}),
        }
    )


def _pinned(node: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _pod_spec(
    spec: ModelDataCacheConfigSpec,
    node: str,
    key: str,
    args: list[str],
    ctx: RenderContext,
    source: ModelSourceConfig | None,
) -> dict[str, Any]:
    csi_key = key if ctx.cache_access == cache_volumes.CacheAccess.CSI else None
    cache = preload_containers.cache_volume(CACHE_VOLUME, spec.host_path, csi_key=csi_key)
    preload = preload_containers.render(CONTAINER, args, cache, source, ctx)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "affinity": _pinned(node),
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": preload.owner_steps,
        "containers": [preload.container],
        "volumes": preload.volumes,
    }
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    if spec.tolerate_all_taints:
        pod["tolerations"] = tolerations.cache_tolerations(ctx.extra_tolerations)
    return pod


def _pod_annotations(spec: ModelDataCacheConfigSpec, ctx: RenderContext) -> dict[str, str]:
    """Operator-wide annotations, then the cache's own (which win on a clash)."""
    return {**ctx.preload_pod_annotations, **(spec.pod_annotations or {})}


def preload_job(
    request: PreloadRequest, spec: ModelDataCacheConfigSpec, ctx: RenderContext, permanent_exit_codes: Collection[int]
) -> Manifest:
    """The Job that fills one node's cache: `warmstart preload --if-missing` pinned to the node."""
    owner = request.owner
    job_labels = _labels(owner, request.node, ROLE_PRELOAD, {ATTEMPT_LABEL: str(request.attempt)})
    source = spec.model_source_config
    # through the CSI driver, a namespace reads a key only where its own preload proved its access
    csi = ctx.cache_access == cache_volumes.CacheAccess.CSI
    args = preloading.preload_args(source, request.key, spec.host_path, request.expected_bytes, admit_reader=csi)
    pod = _pod_spec(spec, request.node, request.key, args, ctx, source)
    job_spec: dict[str, Any] = {
        "backoffLimit": ctx.preload_backoff_limit,
        "activeDeadlineSeconds": ctx.preload_active_deadline_seconds,
        "ttlSecondsAfterFinished": ctx.preload_ttl_seconds_after_finished,
        "template": {"metadata": {"labels": dict(job_labels), "annotations": _pod_annotations(spec, ctx)}, "spec": pod},
    }
    rules: list[dict[str, Any]] = [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    if permanent_exit_codes:
        codes = sorted(set(permanent_exit_codes))
        rules.append(
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": codes}}
        )
    job_spec["podFailurePolicy"] = {"rules": rules}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": preload_job_name(request.key, request.node, request.attempt),
            "namespace": owner.namespace,
            "labels": job_labels,
            "annotations": {GENERATION_ANNOTATION: str(request.generation)},
            # the cache controls its Jobs: only a Job with this controller reference can mark a node ready
            "ownerReferences": [owners.owner_reference(MDCC_KIND, owner.name, owner.uid, controller=True)],
        },
        "spec": job_spec,
    }


def cleanup_job(owner: Owner, key: str, node: str, spec: ModelDataCacheConfigSpec, ctx: RenderContext) -> Manifest:
    """The Job that removes one node's copy: `warmstart preload --delete <key>`.

    It has no ownerReference: it runs while its cache is being deleted, and a foreground deletion would otherwise
    garbage-collect it before it ran. The finalizer deletes it; its TTL catches the rest.
    """
    job_labels = _labels(owner, node, ROLE_CLEANUP)
    pod = _pod_spec(spec, node, key, preloading.delete_args(key, spec.host_path), ctx, None)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": cleanup_job_name(key, node),
            "namespace": owner.namespace,
            "labels": job_labels,
            "annotations": {OWNER_UID_ANNOTATION: owner.uid},
        },
        "spec": {
            "backoffLimit": CLEANUP_BACKOFF_LIMIT,
            "activeDeadlineSeconds": CLEANUP_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": CLEANUP_TTL_SECONDS,
            "template": {
                "metadata": {"labels": dict(job_labels), "annotations": _pod_annotations(spec, ctx)},
                "spec": pod,
            },
        },
    }


@dataclass(frozen=True)
class IndexedJob:
    """A weights-cache Job as the operator's index keeps it."""

    role: str
    owner_uid: str
    job: PreloadJob
    #: field managers that wrote the Job's metadata or spec (status subresources left out): who made it
    managers: frozenset[str] = frozenset()


def writers(body: Mapping[str, Any]) -> frozenset[str]:
    """The field managers of an object's metadata and spec (managedFields entries without a subresource)."""
    entries = (body.get("metadata") or {}).get("managedFields") or []
    return frozenset(str(e.get("manager", "")) for e in entries if not e.get("subresource"))


def made_by(body: Mapping[str, Any], manager: str) -> bool:
    """Whether `manager` alone wrote the object (every non-status managedFields entry is its)."""
    return writers(body) == {manager}


def pods_of(pods: Iterable[Mapping[str, Any]], job: PreloadJob, manager: str) -> list[Mapping[str, Any]]:
    """The pods that can speak for `job`: made by the Job controller (`manager` alone), controlled by the Job's uid,
    and run on the Job's node. A pod a tenant made with the Job's labels is none of these."""
    found = []
    for pod in pods:
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        controlled = any(r.get("controller") is True and r.get("uid") == job.uid for r in refs)
        on_node = (pod.get("spec") or {}).get("nodeName") == job.node
        if controlled and on_node and made_by(pod, manager):
            found.append(pod)
    return found


def parse_time(raw: str | None) -> dt.datetime | None:
    if not raw:
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def _int(raw: Any, default: int = 0) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default


def read_job(body: Mapping[str, Any]) -> IndexedJob:
    """What the controller needs of a Job: role, owner, node, attempt, generation and where it stands."""
    meta = body.get("metadata") or {}
    job_labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    status = body.get("status") or {}
    phase, reason, finished = JobPhase.RUNNING, None, None
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") in ("Complete", "SuccessCriteriaMet") and phase == JobPhase.RUNNING:
            phase, finished = JobPhase.SUCCEEDED, parse_time(cond.get("lastTransitionTime"))
        elif cond.get("type") == "Failed":
            phase, reason, finished = JobPhase.FAILED, cond.get("reason"), parse_time(cond.get("lastTransitionTime"))
    if phase != JobPhase.RUNNING and finished is None:
        finished = parse_time(status.get("completionTime")) or parse_time(meta.get("creationTimestamp"))
    owner_uids = [
        o.get("uid", "")
        for o in meta.get("ownerReferences") or []
        if o.get("kind") == MDCC_KIND and o.get("apiVersion") == API_VERSION and o.get("controller") is True
    ]
    job = PreloadJob(
        name=meta.get("name", ""),
        node=job_labels.get(labels.NODE_LABEL, ""),
        attempt=_int(job_labels.get(ATTEMPT_LABEL)),
        generation=_int(annotations.get(GENERATION_ANNOTATION)),
        uid=meta.get("uid", ""),
        phase=phase,
        active=_int(status["ready"]) if status.get("ready") is not None else _int(status.get("active")),
        failure_reason=reason,
        finished_at=finished,
    )
    role = job_labels.get(labels.ROLE_LABEL, "")
    # a preload Job counts only with the cache's controller reference (labels and annotations are anyone's to set);
    # a cleanup Job has no owner (it outlives its cache) and only ever removes files
    owner_uid = (
        owner_uids[0] if owner_uids else (annotations.get(OWNER_UID_ANNOTATION, "") if role == ROLE_CLEANUP else "")
    )
    return IndexedJob(role=role, owner_uid=owner_uid, job=job, managers=writers(body))


def read_result(pods: Iterable[Mapping[str, Any]], reason_by_exit_code: Mapping[int, str]) -> PreloadResult | None:
    """The newest terminated preload container's termination message; else a reason from its exit code."""

    def started(pod: Mapping[str, Any]) -> str:
        return str((pod.get("metadata") or {}).get("creationTimestamp") or "")

    for pod in sorted(pods, key=started, reverse=True):
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if container.get("name") != CONTAINER or not terminated:
                continue
            parsed = parse_termination_message(terminated.get("message") or "")
            if parsed is not None:
                return parsed
            code = _int(terminated.get("exitCode"), -1)
            if code in reason_by_exit_code:
                return PreloadResult(reason=str(reason_by_exit_code[code]), message=f"exit code {code}")
    return None


def parse_termination_message(message: str) -> PreloadResult | None:
    """`{"reason": ..., "message": ..., "bytes": N, "seconds": S}` from the preload; None if it is not one."""
    try:
        body = json.loads(message)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("reason"), str) or not body["reason"]:
        return None
    raw_bytes, raw_seconds = body.get("bytes"), body.get("seconds")
    sha = body.get("manifestSha256")
    return PreloadResult(
        reason=body["reason"],
        message=str(body.get("message") or ""),
        bytes=int(raw_bytes) if isinstance(raw_bytes, (int, float)) else None,
        seconds=float(raw_seconds) if isinstance(raw_seconds, (int, float)) else None,
        manifest_sha256=sha if isinstance(sha, str) and _SHA256.match(sha) else "",
    )
