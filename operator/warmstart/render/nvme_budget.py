"""Several caches on one node's NVMe: the space the others use, and which unreferenced ones to evict for a new one.

Pure. The operator knows a cache is on a node when the node holds its ready label, a reservation annotation for it
(written atomically before its first Job there: controllers/nvme_reserving.py), or the cache's status shows a preload
there (Pending or Downloading); it counts the cache's size (spec, else the size a preload measured, else the bytes
reserved). Only live caches count, so the reservation of a deleted cache frees its bytes. Files the operator knows
nothing about (a cache whose size is unknown, files left by hand) are not counted: the preload itself checks free
space before writing and fails with DiskFull, which is retried.

Eviction policy (operator setting `cache_eviction_policy`, Helm cache.evictionPolicy):
- `Never`: a cache that does not fit next to the others is Failed/InsufficientCapacity on that node;
- `EvictUnreferencedLRU`: caches no endpoint references are evicted from the node, least recently used first
  (status.lastUsedTime), until the new one fits. A referenced cache is never evicted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from warmstart import placement
from warmstart.api import nodelabels
from warmstart.api.caches import ModelDataCacheConfigSpec

GB = placement.GB


class EvictionPolicy(StrEnum):
    NEVER = "Never"
    EVICT_UNREFERENCED_LRU = "EvictUnreferencedLRU"


@dataclass(frozen=True)
class CacheUsage:
    """One live cache as the operator's usage index keeps it."""

    key: str
    namespace: str
    name: str
    size_bytes: int | None
    referenced: bool
    #: status.lastUsedTime, ISO 8601 UTC ("" when never recorded: evicted first)
    last_used: str
    #: nodes where its status shows a preload under way (the ready label shows the rest)
    filling: frozenset[str] = frozenset()
    uid: str = ""
    #: its spec, for the cleanup Job that evicts it
    spec: ModelDataCacheConfigSpec | None = field(default=None, compare=False)
    #: keys.source_key of its source (the warm-up throttle counts per source)
    source: str = ""


@dataclass(frozen=True)
class Resident:
    """Another cache on a node."""

    key: str
    size_bytes: int
    referenced: bool
    last_used: str
    namespace: str
    name: str
    uid: str = ""
    spec: ModelDataCacheConfigSpec | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Fit:
    """Whether a cache fits a node next to the others, and what must go first."""

    fits: bool
    capacity_bytes: int | None
    needed_bytes: int
    others_bytes: int
    evict: tuple[Resident, ...] = ()

    @property
    def message(self) -> str:
        if self.capacity_bytes is None:
            return "NVMe capacity unknown; the preload checks free space before writing"
        verb = "fits" if self.fits else "does not fit"
        evicting = f"; evicting {', '.join(r.name for r in self.evict)}" if self.evict else ""
        return (
            f"model needs {self.needed_bytes / GB:.1f} GB with margin; node NVMe is {self.capacity_bytes / GB:.1f} GB"
            f" with {self.others_bytes / GB:.1f} GB used by other caches: {verb}{evicting}"
        )


def reservations(annotations: Mapping[str, str]) -> dict[str, int]:
    """Cache key -> bytes reserved on a node, from its annotations (a malformed value reserves nothing)."""
    found: dict[str, int] = {}
    for name, value in annotations.items():
        if name.startswith(nodelabels.RESERVED_WEIGHTS_PREFIX):
            try:
                found[name.removeprefix(nodelabels.RESERVED_WEIGHTS_PREFIX)] = max(int(value), 0)
            except ValueError:
                continue
    return found


def residents_by_node(
    node_labels: Mapping[str, Mapping[str, str]],
    usages: Iterable[CacheUsage],
    own_key: str,
    reserved: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, list[Resident]]:
    """node -> the other caches of known size on it (ready label, reserved there, or a preload under way).

    `reserved` is node -> key -> bytes (`reservations` of each node's annotations); a reservation counts only for a
    live cache (one of `usages`), at least its reserved bytes."""
    reserved = reserved or {}
    by_key: dict[str, CacheUsage] = {}
    for usage in usages:  # one key can have several caches (sharing): it is in use if any is referenced
        if usage.key == own_key:
            continue
        known = by_key.get(usage.key)
        if known is None:
            by_key[usage.key] = usage
        else:
            by_key[usage.key] = replace(
                known,
                size_bytes=max(known.size_bytes or 0, usage.size_bytes or 0) or None,
                referenced=known.referenced or usage.referenced,
                last_used=max(known.last_used, usage.last_used),
                filling=known.filling | usage.filling,
            )
    found: dict[str, list[Resident]] = {}
    for key, usage in by_key.items():
        label = nodelabels.weights_ready_label(key)
        for node, labels in node_labels.items():
            held = reserved.get(node, {}).get(key)
            size = max(usage.size_bytes or 0, held or 0)
            if size and (labels.get(label) == nodelabels.READY or node in usage.filling or held is not None):
                resident = Resident(
                    key,
                    size,
                    usage.referenced,
                    usage.last_used,
                    usage.namespace,
                    usage.name,
                    usage.uid,
                    usage.spec,
                )
                found.setdefault(node, []).append(resident)
    return found


def fit(model_bytes: int, capacity_bytes: int | None, others: Sequence[Resident], policy: EvictionPolicy) -> Fit:
    """Whether `model_bytes` fits next to `others`; under EvictUnreferencedLRU, the LRU evictions that make it fit."""
    needed = placement.required_bytes(model_bytes)
    used = sum(r.size_bytes for r in others)
    if capacity_bytes is None or needed + used <= capacity_bytes:
        return Fit(True, capacity_bytes, needed, used)
    if policy != EvictionPolicy.EVICT_UNREFERENCED_LRU or needed > capacity_bytes:
        return Fit(False, capacity_bytes, needed, used)
    victims: list[Resident] = []
    for resident in sorted((r for r in others if not r.referenced), key=lambda r: (r.last_used, r.key)):
        victims.append(resident)
        used -= resident.size_bytes
        if needed + used <= capacity_bytes:
            return Fit(True, capacity_bytes, needed, used, tuple(victims))
    return Fit(False, capacity_bytes, needed, sum(r.size_bytes for r in others))


def node_usage(own_bytes: int, others: Sequence[Resident], capacity_bytes: int | None) -> tuple[int, int | None]:
    """(used, free) NVMe bytes on a node: this cache (0 when not on the node) plus the others."""
    used = own_bytes + sum(r.size_bytes for r in others)
    return used, (max(capacity_bytes - used, 0) if capacity_bytes is not None else None)
