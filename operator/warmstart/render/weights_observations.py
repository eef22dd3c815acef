"""What one reconcile of a weights cache looks at and decides: the Job, node and result records, Observed and Plan.

Pure data and the failure rules both the plan and its summary use (render/weights_plans.py plans,
render/weights_summaries.py summarizes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import NodeCacheState
from warmstart.render import nvme_budget, throttling

RETRY_BASE_SECONDS = 30.0
RETRY_MAX_SECONDS = 600.0
MAX_ATTEMPTS = 5
MESSAGE_LIMIT = 1024
RETRY_SEPARATOR = "; retry "

INSUFFICIENT_CAPACITY = "InsufficientCapacity"
EVICTED = "Evicted"
QUEUED = "Queued"
#: a node's entry when the node's ready label, not a preload of this cache, says the key is there
LABELLED = "Labelled"
#: Failed reasons that are checked again on every reconcile rather than retried by attempt
RECHECKED_REASONS = frozenset({INSUFFICIENT_CAPACITY, EVICTED})
#: a referenced cache's lastUsedTime is refreshed at most this often (one status write per hour)
LAST_USED_REFRESH = dt.timedelta(hours=1)
#: Job conditions without a termination message that are worth a retry (a crash, OOM kill or eviction)
RETRYABLE_JOB_REASONS = frozenset({"BackoffLimitExceeded"})


class JobPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class NodeLike(Protocol):
    """What the plan needs of a node (controllers.nodes.NodeFacts fits)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class PreloadJob:
    """One preload Job as the operator's index sees it."""

    name: str
    node: str
    attempt: int
    generation: int
    uid: str
    phase: JobPhase
    active: int = 0
    failure_reason: str | None = None
    finished_at: dt.datetime | None = None


@dataclass(frozen=True)
class PreloadResult:
    """A preload container's termination message (or what could be read of it)."""

    reason: str
    message: str = ""
    bytes: int | None = None
    seconds: float | None = None
    #: the sha256 of the manifest the preload published or proved ('' when it reported none)
    manifest_sha256: str = ""


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile of one cache looks at."""

    generation: int
    key: str
    spec: ModelDataCacheConfigSpec
    status: ModelDataCacheConfigStatus
    nodes: Sequence[NodeLike]
    jobs: Sequence[PreloadJob]
    results: Mapping[str, PreloadResult]
    retryable_reasons: Collection[str]
    #: node -> why it is left out (render/node_health.py)
    unavailable: Mapping[str, str] = field(default_factory=dict)
    throttle: throttling.Throttle = field(default_factory=throttling.Throttle)
    #: preloads of other caches of the same source under way (any namespace): they take this cache's slots too
    source_busy: int = 0
    #: node -> the other caches on it (render/nvme_budget.py)
    residents: Mapping[str, Sequence[nvme_budget.Resident]] = field(default_factory=dict)
    eviction_policy: nvme_budget.EvictionPolicy = nvme_budget.EvictionPolicy.NEVER
    #: nodes whose evicted annotation names this cache
    evicted: Collection[str] = frozenset()
    #: nodes where a model pod waits for this cache through the CSI driver: targets too, whatever the targeting
    demanded: Collection[str] = frozenset()
    #: whether a node another cache of the key filled still needs this cache's own preload there before it counts as
    #: Ready (the CSI driver mounts a key for a namespace only where its own preload proved its access)
    prove_each_reader: bool = False


@dataclass
class Plan:
    """What to do and what to report."""

    status: ModelDataCacheConfigStatus
    create: list[tuple[str, int]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    #: node -> the sha256 of the manifest a preload of this cache just published there (the node's content annotation)
    content: dict[str, str] = field(default_factory=dict)
    #: (node, cache) to evict from the node before this cache fills it
    evict: list[tuple[str, nvme_budget.Resident]] = field(default_factory=list)
    recorded: list[tuple[NodeCacheStatus, PreloadJob]] = field(default_factory=list)
    requeue_after: float | None = None


def clip(text: str | None) -> str | None:
    return text[:MESSAGE_LIMIT] if text else text


def is_retryable(reason: str, retryable_reasons: Collection[str]) -> bool:
    """A preload reason worth retrying with the same spec, or a Job failure without a message (crash, eviction)."""
    return reason in retryable_reasons or reason in RETRYABLE_JOB_REASONS


def is_permanent_failure(entry: NodeCacheStatus, retryable_reasons: Collection[str]) -> bool:
    """A Failed node that will not be retried with this spec."""
    if entry.state != NodeCacheState.FAILED:
        return False
    return not is_retryable(entry.reason or "", retryable_reasons) or (entry.attempts or 0) >= MAX_ATTEMPTS
