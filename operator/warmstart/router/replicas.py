"""The fleet the router forwards to: replica addresses and their exact in-flight counts.

Discovery replaces the set of addresses; the proxy acquires and releases in-flight slots. A
replica removed while requests are still in flight keeps its object alive until they finish,
so a release never lands on a different replica and counters stay exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warmstart.router.strategies import ReplicaLoad, Snapshot


@dataclass(eq=False, slots=True)
class Replica:
    """One model replica behind the router."""

    url: str
    """Base URL, e.g. ``http://10.0.0.7:8000`` (also the replica's name in metrics)."""

    inflight: int = 0
    """Requests sent to this replica and not yet finished (exact)."""

    served: int = field(default=0)
    """Requests ever sent to this replica (for status and tests)."""

    prefill_chars: int = 0
    """Estimated uncached prompt characters sent and not yet answered with a first byte."""

    node: str | None = None
    """The node the replica's pod runs on (EndpointSlice ``nodeName``), when discovery knows it."""


def normalise_url(url: str) -> str:
    """``h:p`` or ``http://h:p/`` -> ``http://h:p``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


class Fleet:
    """The current replicas, keyed by URL."""

    def __init__(self, urls: Iterable[str] = ()) -> None:
        self._replicas: dict[str, Replica] = {}
        self._ordered: tuple[Replica, ...] = ()  # by URL; rebuilt only when the set changes
        self.replace(urls)

    def replace(self, urls: Iterable[str], nodes: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
        """Make the fleet exactly ``urls`` (with their nodes, when known); return (added, removed) URLs."""
        wanted = {normalise_url(url) for url in urls if url.strip()}
        removed = sorted(set(self._replicas) - wanted)
        added = sorted(wanted - set(self._replicas))
        for url in removed:
            del self._replicas[url]
        for url in added:
            self._replicas[url] = Replica(url)
        located = {normalise_url(url): node for url, node in (nodes or {}).items()}
        for url, replica in self._replicas.items():
            replica.node = located.get(url)
        self._ordered = tuple(self._replicas[url] for url in sorted(self._replicas))
        return added, removed

    def get(self, url: str) -> Replica | None:
        return self._replicas.get(url)

    def urls(self) -> list[str]:
        return [replica.url for replica in self._ordered]

    def __len__(self) -> int:
        return len(self._replicas)

    def snapshot(self) -> Snapshot:
        """What the policy sees: names and in-flight counts, sorted by name."""
        return Snapshot(tuple([ReplicaLoad(r.url, r.inflight, r.prefill_chars) for r in self._ordered]))

    def replicas(self) -> list[Replica]:
        return list(self._ordered)
