"""How many nodes may preload one cache at the same time, so a fleet does not hit its source all at once.

Default: max(16, 25% of the target nodes, rounded up), so up to 16 nodes fill at once and a large fleet fills in at
most four waves. The operator settings (Helm cache.preloadConcurrency.nodes / .percent) change the default; a cache's
`spec.preloadConcurrency` overrides it. The gate is unchanged: it still waits for every target node (or
maxDeployTimeInSeconds), so a throttle lengthens the wait by about ceil(targets / limit) preload durations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_NODES = 16
DEFAULT_PERCENT = 25


@dataclass(frozen=True)
class Throttle:
    """The operator-wide default: at least `nodes`, or `percent` of the targets when that is more."""

    nodes: int = DEFAULT_NODES
    percent: int = DEFAULT_PERCENT


def limit(throttle: Throttle, override: int | None, targets: int) -> int:
    """Preloads of one cache allowed at the same time (at least 1)."""
    if override:
        return max(override, 1)
    return max(throttle.nodes, math.ceil(targets * throttle.percent / 100), 1)
