"""FSx for Lustre sources as the CSI driver wants them: a static PersistentVolume and a claim bound to it.

The FSx CSI driver does not take inline ephemeral volumes; it documents static provisioning: a PersistentVolume with
`volumeHandle` = the file system id and the `dnsname` and `mountname` attributes, and a claim with `volumeName` and
`storageClassName: ""`. The pods (model pods' preload init container, preload Jobs) mount the claim read-only.

- One claim per namespace and file system (its name hashes the id, DNS name and mount name), shared by every
  endpoint and cache there: each user adds its own plain owner reference (per-uid field manager, as the shared
  caches do), and the last user to let go deletes the claim and the volume (`controllers/fsx.py`).
- The PersistentVolume is cluster-scoped, so it is named from the namespace and the claim (hashed, unique), and its
  `claimRef` is pinned to that namespace and claim: a claim of another namespace naming it stays Pending.
- Reclaim policy Retain: with Delete the driver would be asked to delete the file system itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from warmstart.api import GROUP
from warmstart.api.sources import FsxStorage, ModelSourceConfig, ModelSourceType
from warmstart.render import labels, names

Manifest = dict[str, Any]

DRIVER = "fsx.csi.aws.com"
#: a static PV must state a capacity; FSx ignores it (the claim requests no more than this)
CAPACITY = "1200Gi"
#: labels that let the finalizer find what it created
CLAIM_NAMESPACE_LABEL = f"{GROUP}/fsx-claim-namespace"
CLAIM_NAME_LABEL = f"{GROUP}/fsx-claim-name"
COMPONENT = "fsx-source"
#: the label selector of every FSx claim and volume warmstart creates
COMPONENT_SELECTOR = f"{labels.MANAGED_BY}={labels.MANAGER},{labels.COMPONENT}={COMPONENT}"


def _digest(*parts: str, length: int) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def complete(fsx: FsxStorage) -> bool:
    """Whether the driver has all it needs: the DNS name and the mount name besides the id."""
    return bool(fsx.dns_name and fsx.mount_name)


def allowed_storage(storage: FsxStorage, allowed: Sequence[FsxStorage]) -> FsxStorage | str:
    """The allowlist's entry for `storage` (complete: id, DNS and mount name), or why it is refused.

    Names the spec gives must equal the entry's: a spec cannot point an allowed id at another server or mount."""
    entry = next((a for a in allowed if a.file_system_id == storage.file_system_id), None)
    if entry is None:
        listed = ", ".join(a.file_system_id for a in allowed) or "none"
        return (
            f"FSx file system {storage.file_system_id} is not allowed here (allowed: {listed}); the cluster admin "
            "lists file systems per namespace in the Helm value fsx.allowedFileSystems"
        )
    for field, given, kept in (
        ("dnsName", storage.dns_name, entry.dns_name),
        ("mountName", storage.mount_name, entry.mount_name),
    ):
        if given and given != kept:
            return (
                f"FSx file system {storage.file_system_id}: spec {field} {given!r} differs from the allowed one "
                f"{kept!r} (Helm value fsx.allowedFileSystems); leave it out or use the allowed value"
            )
    return entry


def storage_of(source: ModelSourceConfig | None) -> FsxStorage | None:
    """The FSx block when the source is an FSx file system."""
    if source is None or source.model_source_type != ModelSourceType.FSX:
        return None
    return source.fsx_storage


def claim_name(fsx: FsxStorage) -> str:
    """The claim's name in the user's namespace: one per file system (and DNS and mount name)."""
    return f"warmstart-fsx-{_digest(fsx.file_system_id, fsx.dns_name or '', fsx.mount_name or '', length=16)}"


def volume_name(namespace: str, fsx: FsxStorage) -> str:
    """The cluster-wide PersistentVolume name: unique per namespace and claim."""
    return f"warmstart-fsx-{_digest(namespace, claim_name(fsx), length=24)}"


def _labels(namespace: str, fsx: FsxStorage) -> dict[str, str]:
    return labels.managed(
        {
            labels.COMPONENT: COMPONENT,
            CLAIM_NAMESPACE_LABEL: names.label_value(namespace),
            CLAIM_NAME_LABEL: claim_name(fsx),
        }
    )


def persistent_volume(namespace: str, fsx: FsxStorage) -> Manifest:
    """The static PersistentVolume for `fsx`, reserved for its claim in `namespace`."""
    attributes = {"dnsname": fsx.dns_name or "", "mountname": fsx.mount_name or ""}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(namespace, fsx), "labels": _labels(namespace, fsx)},
        "spec": {
            "capacity": {"storage": CAPACITY},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["flock"],
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": namespace,
                "name": claim_name(fsx),
            },
            "csi": {"driver": DRIVER, "volumeHandle": fsx.file_system_id, "volumeAttributes": attributes},
        },
    }


def persistent_volume_claim(namespace: str, fsx: FsxStorage, owner: Manifest) -> Manifest:
    """The claim bound to the static volume, with `owner` (a plain owner reference) as one of its users."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(fsx),
            "namespace": namespace,
            "labels": _labels(namespace, fsx),
            "ownerReferences": [owner],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume_name(namespace, fsx),
            "resources": {"requests": {"storage": CAPACITY}},
        },
    }


def pod_volume(volume: str, fsx: FsxStorage) -> Manifest:
    """The pod volume that mounts the claim, read-only."""
    return {"name": volume, "persistentVolumeClaim": {"claimName": claim_name(fsx), "readOnly": True}}
