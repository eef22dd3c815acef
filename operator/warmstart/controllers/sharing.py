"""Shared, reference-counted caches: endpoints attach to and release MDCCs and MICs by server-side apply.

Each parent applies its own entry of `spec.parentReferences` and `metadata.ownerReferences` (both list-maps keyed by
uid) with its own field manager, so two endpoints can attach and release concurrently without read-modify-write
races. The parent that removes the last reference deletes the cache; if the operator is down, Kubernetes garbage
collection does it through the owner references.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from warmstart.api import API_VERSION, GROUP, VERSION
from warmstart.api.caches import MDCC_PLURAL, MIC_PLURAL
from warmstart.api.statuses import CacheSummary
from warmstart.controllers.settings import OperatorSettings
from warmstart.controllers.storage import Conflict, Store
from warmstart.render import caches

Manifest = dict[str, Any]


def _summary(name: str, status: Mapping[str, Any]) -> CacheSummary:
    return CacheSummary.model_validate(
        {**{k: v for k, v in status.items() if k in ("state", "readyNodes", "targetNodes", "message")}, "name": name}
    )


def weights_cache_summaries(
    namespace: str | None, name: str, status: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], CacheSummary]:
    """(namespace, name) -> status summary of every MDCC."""
    return {(namespace or "", name): _summary(name, status)}


def image_cache_summaries(
    namespace: str | None, name: str, status: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], CacheSummary]:
    """(namespace, name) -> status summary of every MIC."""
    return {(namespace or "", name): _summary(name, status)}


def _parents(spec: Mapping[str, Any]) -> list[str]:
    return [str(p.get("uid")) for p in spec.get("parentReferences") or [] if p.get("uid")]


def weights_caches_by_parent(name: str, spec: Mapping[str, Any], **_: Any) -> dict[str, str]:
    """parent uid -> names of the MDCCs it references."""
    return {uid: name for uid in _parents(spec)}


def image_caches_by_parent(name: str, spec: Mapping[str, Any], **_: Any) -> dict[str, str]:
    """parent uid -> names of the MICs it references."""
    return {uid: name for uid in _parents(spec)}


def lookup(index: Mapping[Any, Any], key: Any) -> list[Any]:
    """All values of a kopf index under one key (empty when absent)."""
    try:
        return list(index[key])
    except KeyError:
        return []


def attach(store: Store, manifest: Manifest, parent_uid: str) -> Manifest:
    """Create the cache or add this parent's references to it."""
    writer = Store(store.api, field_manager=caches.parent_field_manager(parent_uid))
    return writer.apply(manifest)


def release(store: Store, kind: str, name: str, namespace: str, parent_uid: str) -> bool:
    """Drop this parent's references; delete the cache when no parent is left. True when the cache is gone."""
    current = store.get(API_VERSION, kind, name, namespace)
    if current is None:
        return True
    writer = Store(store.api, field_manager=caches.parent_field_manager(parent_uid))
    remaining = [p for p in current.get("spec", {}).get("parentReferences") or [] if p.get("uid") != parent_uid]
    if len(remaining) == len(current.get("spec", {}).get("parentReferences") or []) and remaining:
        return False
    if not remaining:
        # The last parent deletes the cache with its reference still on it. Detaching first would leave, after a crash
        # between the two calls, a cache that no parent references and nothing ever deletes (its DaemonSet and node
        # labels with it). The precondition lets a parent that attached meanwhile win: then release as one of several.
        try:
            store.delete(API_VERSION, kind, name, namespace, resource_version=current["metadata"]["resourceVersion"])
            return True
        except Conflict:
            current = store.get(API_VERSION, kind, name, namespace)
            if current is None:
                return True
    result = writer.apply(caches.detached(current))
    left = [p for p in result.get("spec", {}).get("parentReferences") or [] if p.get("uid") != parent_uid]
    if not left:
        store.delete(API_VERSION, kind, name, namespace)
        return True
    return False


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings) -> None:
    """Register the cache indexes the endpoint controller reads: status summaries, and caches by parent."""
    del settings
    for plural, summaries, by_parent in (
        (MDCC_PLURAL, weights_cache_summaries, weights_caches_by_parent),
        (MIC_PLURAL, image_cache_summaries, image_caches_by_parent),
    ):
        kopf.index(GROUP, VERSION, plural, registry=registry)(summaries)
        kopf.index(GROUP, VERSION, plural, registry=registry)(by_parent)
