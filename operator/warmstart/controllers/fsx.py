"""FSx sources: complete a file system's DNS and mount names (DescribeFileSystems), attach and release its claim.

- `completed`: an FSx source without `dnsName` or `mountName` is completed with the operator's AWS identity
  (fsx:DescribeFileSystems), cached for a few minutes; when that fails the endpoint fails with `FsxDetailsMissing`,
  whose message asks for the two names.
- `attach`: apply the static PersistentVolume (the operator's field manager) and the claim, whose owner reference to
  the user is applied with the user's own field manager, so endpoints and caches share one claim without races.
- `release`: drop the user's owner reference; the last user deletes the claim and its PersistentVolume (cluster
  scoped: no owner reference can take it away, so this is the only path that does).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from warmstart.api.sources import FsxStorage, ModelSourceConfig
from warmstart.controllers.resolving import ResolutionFailed
from warmstart.controllers.storage import Store
from warmstart.render import caches, fsx

Manifest = dict[str, Any]

REASON = "FsxDetailsMissing"
LOOKUP_TTL_SECONDS = 300.0


class LookupFailed(Exception):
    """DescribeFileSystems gave no answer for the file system; `retryable` when it may next time."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class Lookups:
    """Completed names by (file system id, region), kept for a few minutes to spare FSx calls."""

    entries: dict[tuple[str, str], tuple[float, tuple[str, str]]]
    lock: threading.Lock

    @classmethod
    def empty(cls) -> Lookups:
        return cls({}, threading.Lock())


def describe(file_system_id: str, region: str) -> tuple[str, str]:
    """(DNS name, Lustre mount name) of a file system, with the operator's credentials."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        # a fresh session each time: credentials as they are now (rotated web-identity tokens, no process-wide cache)
        client = boto3.session.Session().client("fsx", region_name=region)
        answer = client.describe_file_systems(FileSystemIds=[file_system_id])
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        retryable = code in ("ThrottlingException", "InternalServerError", "ServiceUnavailable")
        raise LookupFailed(f"DescribeFileSystems failed: {code or error}", retryable=retryable) from error
    except NoCredentialsError as error:
        raise LookupFailed(
            "the operator has no AWS credentials to call DescribeFileSystems", retryable=False
        ) from error
    except BotoCoreError as error:
        raise LookupFailed(f"DescribeFileSystems failed: {error}", retryable=True) from error
    systems = answer.get("FileSystems") or []
    if not systems:
        raise LookupFailed(f"no file system {file_system_id} in {region}", retryable=False)
    system = systems[0]
    dns, mount = system.get("DNSName"), (system.get("LustreConfiguration") or {}).get("MountName")
    if not dns or not mount:
        raise LookupFailed(f"{file_system_id} is not an FSx for Lustre file system with a mount name", retryable=False)
    return str(dns), str(mount)


def complete(fsx_storage: FsxStorage, region: str, lookups: Lookups) -> FsxStorage:
    """`fsx_storage` with its DNS and mount names filled in (given names are kept); raises `LookupFailed`."""
    if fsx.complete(fsx_storage):
        return fsx_storage
    key = (fsx_storage.file_system_id, region)
    with lookups.lock:
        hit = lookups.entries.get(key)
    if hit is None or time.monotonic() - hit[0] >= LOOKUP_TTL_SECONDS:
        hit = (time.monotonic(), describe(fsx_storage.file_system_id, region))
        with lookups.lock:
            lookups.entries[key] = hit
    dns, mount = hit[1]
    return fsx_storage.model_copy(
        update={"dns_name": fsx_storage.dns_name or dns, "mount_name": fsx_storage.mount_name or mount}
    )


def completed_source(source: ModelSourceConfig, region: str, lookups: Lookups) -> ModelSourceConfig:
    """The source with a complete FSx block; `ResolutionFailed(FsxDetailsMissing)` when the names cannot be had."""
    storage = fsx.storage_of(source)
    if storage is None or fsx.complete(storage):
        return source
    try:
        done = complete(storage, region, lookups)
    except LookupFailed as error:
        message = (
            f"FSx file system {storage.file_system_id}: set spec.modelSourceConfig.fsxStorage.dnsName and mountName "
            f"(the FSx CSI driver needs both), or let the operator's AWS identity call fsx:DescribeFileSystems "
            f"in {region} ({error})"
        )
        raise ResolutionFailed(REASON, message, retryable=error.retryable) from error
    return source.model_copy(update={"fsx_storage": done})


def attach(store: Store, namespace: str, storage: FsxStorage, owner: Manifest) -> None:
    """Ensure the PersistentVolume and the claim exist, with `owner` among the claim's users."""
    store.apply(fsx.persistent_volume(namespace, storage))
    writer = Store(store.api, field_manager=caches.parent_field_manager(str(owner["uid"])))
    writer.apply(fsx.persistent_volume_claim(namespace, storage, owner))


def release(store: Store, namespace: str, uid: str, keep: str | None = None) -> None:
    """Drop `uid` from every FSx claim of warmstart's in `namespace` but `keep`; delete what no one uses any more."""
    for claim in store.list("v1", "PersistentVolumeClaim", namespace, label_selector=fsx.COMPONENT_SELECTOR):
        meta = claim["metadata"]
        refs = meta.get("ownerReferences") or []
        if meta["name"] == keep or not any(r.get("uid") == uid for r in refs):
            continue
        others = [r for r in refs if r.get("uid") != uid]
        if others:
            writer = Store(store.api, field_manager=caches.parent_field_manager(uid))
            # items of a LIST carry no apiVersion or kind: state them
            meta_only = {"name": meta["name"], "namespace": namespace, "ownerReferences": []}
            writer.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta_only})
            continue
        store.delete("v1", "PersistentVolumeClaim", meta["name"], namespace)
        volume = (claim.get("spec") or {}).get("volumeName")
        if volume:
            store.delete("v1", "PersistentVolume", volume)
