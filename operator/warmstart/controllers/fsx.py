"""FSx sources: check a file system against the admin's allowlist for the namespace, attach and release its claim.

- `completed_source`: an FSx source is mounted only if the cluster admin allowed that file system for the endpoint's
  namespace (Helm value `fsx.allowedFileSystems`; the chart's admission policy applies the same list). A Lustre mount
  is authorized by the network, not by the tenant's IAM identity, so without the list a tenant could mount any file
  system the nodes reach. The DNS and mount names come from the list; names in the spec must agree with it. The
  operator never looks them up with its own AWS identity. Otherwise the endpoint fails with `FsxNotAllowed`.
- `attach`: apply the static PersistentVolume (the operator's field manager) and the claim, whose owner reference to
  the user is applied with the user's own field manager, so endpoints and caches share one claim without races.
- `release`: drop the user's owner reference; the last user deletes the claim and its PersistentVolume (cluster
  scoped: no owner reference can take it away, so this is the only path that does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from warmstart.api.sources import FsxStorage, ModelSourceConfig
from warmstart.controllers.resolving import ResolutionFailed
from warmstart.controllers.storage import Store
from warmstart.render import caches, fsx

Manifest = dict[str, Any]

REASON = "FsxNotAllowed"


def completed_source(
    source: ModelSourceConfig, namespace: str, allowed: Mapping[str, Sequence[FsxStorage]]
) -> ModelSourceConfig:
    """The source with the admin's FSx names for `namespace`; `ResolutionFailed(FsxNotAllowed)` when not allowed."""
    storage = fsx.storage_of(source)
    if storage is None:
        return source
    found = fsx.allowed_storage(storage, allowed.get(namespace, ()))
    if isinstance(found, str):
        raise ResolutionFailed(REASON, f"namespace {namespace}: {found}", retryable=False)
    return source.model_copy(update={"fsx_storage": found})


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
