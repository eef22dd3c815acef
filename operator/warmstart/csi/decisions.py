"""Who may mount which cache directory: the CSI driver's decision, pure (facts in, a verdict out).

The kubelet calls NodePublishVolume with the pod's namespace, name, uid and service account (`podInfoOnMount`) and
the volume's attributes, which the pod's author wrote and so are never trusted alone:

- **read** (`access: read`, a model pod): the pod's OWN namespace must hold a ModelDataCacheConfig whose key, computed
  here from its spec, its namespace and the admin's trust groups (render/keys.py, render/scopes.py), is the key named.
  A key's scope is in its hash, so this admits exactly the namespaces of the key's scope: its own namespace, its trust
  group, or any namespace for a `public` key. Its root must be an allowed cache root. The pod gets
  `<root>/warmstart/keys/<key>/model`, read-only, once this node's reader mark of the namespace names the content
  the key holds now (csi/proofs.py): the driver writes it after a preload Job of that namespace proved, with the
  namespace's own credentials, that it may read every file of the source and that the cached files are the source's.
  A namespace sharing a key that another namespace filled waits (UNAVAILABLE) until its own Job has checked.
- **write** (`access: write`, a preload or cleanup Job's pod): the same cache check, and the pod's controller must be
  a Job of the operator for that key on THIS node: its name is the operator's name for it, its uid is the one the
  operator signed (render/signatures.py), and the pod runs exactly that Job's template (a pod that names the Job as
  its owner but runs something else gets nothing; render/pod_templates.py). The pod gets the key's own tree,
  `<root>/warmstart/keys/<key>`, read-write, and nothing else of the node: no other key, no reader mark.

Anything else is `DENIED` with a message that says what is missing; the kubelet shows it in a FailedMount Event.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from warmstart.api import preloading
from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.render import cache_volumes, hostpaths, jobs, keys, labels, signatures
from warmstart.render import pod_templates as templates

#: volume attributes the pod's author sets (the rest come from the kubelet)
KEY_ATTRIBUTE = cache_volumes.KEY_ATTRIBUTE
ACCESS_ATTRIBUTE = cache_volumes.ACCESS_ATTRIBUTE
READ, WRITE = cache_volumes.READ, cache_volumes.WRITE
#: what the kubelet adds with podInfoOnMount
POD_NAME = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE = "csi.storage.k8s.io/pod.namespace"
POD_UID = "csi.storage.k8s.io/pod.uid"
SERVICE_ACCOUNT = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL = "csi.storage.k8s.io/ephemeral"
_KEY = re.compile(r"^[0-9a-f]{32}$")


class Verdict(str, enum.Enum):
    MOUNT = "Mount"
    DENIED = "Denied"
    #: retry later (the kubelet does): the operator has not signed its Job yet
    NOT_YET = "NotYet"


@dataclasses.dataclass(frozen=True)
class Volume:
    """One NodePublishVolume request, as far as the decision needs it."""

    pod_name: str
    namespace: str
    pod_uid: str
    service_account: str
    key: str
    access: str


@dataclasses.dataclass(frozen=True)
class Cache:
    """A ModelDataCacheConfig of the pod's namespace: its name, computed key and root."""

    name: str
    key: str
    host_path: str


@dataclasses.dataclass(frozen=True)
class WriterMount:
    """Whose write mount this is: what the driver records, to read the writer's proof when its volume goes."""

    namespace: str
    pod_uid: str
    key: str
    host_path: str
    role: str


@dataclasses.dataclass(frozen=True)
class Decision:
    verdict: Verdict
    message: str
    #: the node directory to bind-mount (MOUNT only)
    path: str = ""
    read_only: bool = True
    #: the reader's mark that must name the key's current content before the mount (MOUNT of a read only)
    reader_mark: str = ""
    #: the cache's root and key (MOUNT only)
    host_path: str = ""
    key: str = ""
    #: the writer (MOUNT of a write only)
    writer: WriterMount | None = None


def denied(message: str) -> Decision:
    return Decision(Verdict.DENIED, message)


def parse_volume(context: Mapping[str, str], read_only: bool) -> Volume | Decision:
    """The request's pod and cache, or DENIED when the kubelet sent no pod information or the attributes are bad."""
    missing = [name for name in (POD_NAME, POD_NAMESPACE, POD_UID) if not context.get(name)]
    if missing:
        return denied(f"no pod information ({', '.join(missing)}): the CSIDriver object must set podInfoOnMount")
    if context.get(EPHEMERAL) not in (None, "true"):
        return denied("only inline ephemeral volumes are served (no PersistentVolume may name a cache)")
    key = context.get(KEY_ATTRIBUTE, "")
    if not _KEY.match(key):
        return denied(f"volume attribute {KEY_ATTRIBUTE!r} must be a cache key (32 lowercase hex characters)")
    access = context.get(ACCESS_ATTRIBUTE, READ)
    if access not in (READ, WRITE):
        return denied(f"volume attribute {ACCESS_ATTRIBUTE!r} must be {READ!r} or {WRITE!r}, not {access!r}")
    if access == READ and not read_only:
        return denied("a cache is mounted read-only: set readOnly: true on the csi volume")
    return Volume(
        pod_name=context[POD_NAME],
        namespace=context[POD_NAMESPACE],
        pod_uid=context[POD_UID],
        service_account=context.get(SERVICE_ACCOUNT, ""),
        key=key,
        access=access,
    )


def caches_of(namespace: str, bodies: Sequence[Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> list[Cache]:
    """The caches of `namespace` with keys computed from their specs (never from their status, which is only data)."""
    found = []
    for body in bodies:
        meta = body.get("metadata") or {}
        if meta.get("namespace") != namespace:
            continue
        try:
            spec = ModelDataCacheConfigSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            continue
        key = keys.weights_key_in(spec.model_source_config, spec.host_path, namespace, groups)
        found.append(Cache(name=str(meta.get("name", "")), key=key, host_path=spec.host_path))
    return found


def _cache_for(volume: Volume, caches: Sequence[Cache], allowed_roots: Sequence[str]) -> Cache | Decision:
    matching = [c for c in caches if c.key == volume.key]
    if not matching:
        return denied(
            f"namespace {volume.namespace} has no ModelDataCacheConfig with key {volume.key}: pod"
            f" {volume.pod_name} may not read that cache (a key's scope admits its own namespace, its trust group, or"
            " every namespace for a public model)"
        )
    cache = sorted(matching, key=lambda c: c.name)[0]
    refusal = hostpaths.refusal(cache.host_path, allowed_roots)
    if refusal is not None:
        return denied(f"cache {cache.name}: {refusal}")
    return cache


def decide_read(volume: Volume, caches: Sequence[Cache], allowed_roots: Sequence[str]) -> Decision:
    """A model pod: its namespace's cache with that key, read-only."""
    found = _cache_for(volume, caches, allowed_roots)
    if isinstance(found, Decision):
        return found
    return Decision(
        Verdict.MOUNT,
        f"cache {found.name} read-only",
        path=preloading.model_dir(found.host_path, volume.key),
        read_only=True,
        reader_mark=preloading.reader_mark(found.host_path, volume.key, volume.namespace),
        host_path=found.host_path,
        key=volume.key,
    )


@dataclasses.dataclass(frozen=True)
class Writer:
    """What the API says about a would-be writer: its pod and the Job its controller reference names (if any)."""

    pod: Mapping[str, Any]
    job: Mapping[str, Any] | None


def controller_job(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the Job the pod's controller reference names."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
            return str(ref.get("name", "")), str(ref.get("uid", ""))
    return None


def _job_roles(key: str, node: str, job_labels: Mapping[str, str]) -> dict[str, str]:
    """The operator's Job names for `key` on `node`, with the role of each."""
    names = {jobs.cleanup_job_name(key, node): jobs.ROLE_CLEANUP}
    attempt = job_labels.get(jobs.ATTEMPT_LABEL, "")
    if attempt.isdigit():
        names[jobs.preload_job_name(key, node, int(attempt))] = jobs.ROLE_PRELOAD
    return names


def decide_write(
    volume: Volume,
    caches: Sequence[Cache],
    allowed_roots: Sequence[str],
    node: str,
    writer: Writer,
    signing_key: bytes,
) -> Decision:
    """A preload or cleanup Job's pod: the operator's signed Job for this key on this node, running its template."""
    found = _cache_for(volume, caches, allowed_roots)
    if isinstance(found, Decision):
        return found
    who = f"pod {volume.namespace}/{volume.pod_name}"
    pod_meta = writer.pod.get("metadata") or {}
    if pod_meta.get("uid") != volume.pod_uid:
        return denied(f"{who} is not the pod the kubelet mounts for (uid differs)")
    ref = controller_job(writer.pod)
    if ref is None:
        return denied(f"{who} may not write the cache: only the operator's preload and cleanup Jobs may")
    if writer.job is None:
        return denied(f"{who} names Job {ref[0]} as its controller, and that Job does not exist")
    job_meta = writer.job.get("metadata") or {}
    job_name, job_uid = str(job_meta.get("name", "")), str(job_meta.get("uid", ""))
    job_labels = job_meta.get("labels") or {}
    if (job_name, job_uid) != ref:
        return denied(f"{who} names Job {ref[0]} (uid {ref[1]}), which is another Job now")
    roles = _job_roles(volume.key, node, job_labels)
    if job_labels.get(labels.NODE_LABEL) != node or job_name not in roles:
        return denied(f"Job {job_name} is not the operator's Job for cache key {volume.key} on node {node}")
    signature = str((job_meta.get("annotations") or {}).get(signatures.ANNOTATION, ""))
    if not signature:
        return Decision(Verdict.NOT_YET, f"Job {job_name} is not signed by the operator yet")
    if not signatures.valid(signing_key, signature, volume.namespace, job_name, job_uid, volume.key, node):
        return denied(f"Job {job_name} carries no valid operator signature: it was not created by the operator")
    template = ((writer.job.get("spec") or {}).get("template") or {}).get("spec") or {}
    mismatch = templates.mismatch(writer.pod.get("spec") or {}, template)
    if mismatch is not None:
        return denied(f"{who} does not run the template of Job {job_name} ({mismatch} differs)")
    return Decision(
        Verdict.MOUNT,
        f"cache {found.name} read-write for Job {job_name} (its key's tree only)",
        path=preloading.key_dir(found.host_path, volume.key),
        read_only=False,
        host_path=found.host_path,
        key=volume.key,
        writer=WriterMount(volume.namespace, volume.pod_uid, volume.key, found.host_path, roles[job_name]),
    )
