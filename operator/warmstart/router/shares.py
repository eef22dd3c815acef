"""Each replica's share of the recent requests a router sent: exponentially decayed counts, O(1) per request.

The decay is per request, not per second, so the window means the same thing at every load
level: with ``window`` = W, a request sent k requests ago counts (1 - 1/W)^k, and the counts
over all replicas add up to at most W. Each router replica keeps its own meter (no shared
state); with requests spread at random over router replicas, each sees the same shares.
"""

from __future__ import annotations

#: Renormalise the growing unit weight before floats lose precision.
_RESCALE_ABOVE = 1e12


class ShareMeter:
    """Decayed per-replica request counts over roughly the last ``window`` requests."""

    __slots__ = ("_counts", "_grow", "_total", "_unit")

    def __init__(self, window: int) -> None:
        self._grow = 1.0 / (1.0 - 1.0 / max(2, window))
        self._unit = 1.0  # weight of the next request; older ones keep their smaller weight
        self._counts: dict[str, float] = {}
        self._total = 0.0

    def add(self, replica: str) -> None:
        """``replica`` was sent one more request."""
        self._counts[replica] = self._counts.get(replica, 0.0) + self._unit
        self._total += self._unit
        self._unit *= self._grow
        if self._unit > _RESCALE_ABOVE:
            scale = 1.0 / self._unit
            self._counts = {name: count * scale for name, count in self._counts.items()}
            self._total *= scale
            self._unit = 1.0

    def recent(self, replica: str) -> float:
        """Decayed count of requests sent to ``replica`` (the newest counts 1)."""
        return self._counts.get(replica, 0.0) / self._unit

    def total(self) -> float:
        """Decayed count of requests sent to all replicas still known."""
        return self._total / self._unit

    def forget(self, replica: str) -> None:
        """``replica`` left the fleet: its requests no longer count."""
        self._total -= self._counts.pop(replica, 0.0)
        self._total = max(0.0, self._total)
