"""The routing strategies, and every spelling of each that the API and the router accept.

One list serves the CRD (its enum is `SPELLINGS`), the endpoint models and the router's configuration, so
a strategy the CRD admits is always one the router can run.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema


class RoutingStrategy(StrEnum):
    """How the router picks a replica for a request."""

    RANDOM = "random"
    ROUNDROBIN = "roundrobin"
    LEASTOUTSTANDING = "leastoutstanding"
    SESSION = "session"
    PREFIXAWARE = "prefixaware"
    KVAWARE = "kvaware"


#: Every accepted spelling -> the strategy it names. The CRD admits exactly these strings.
SPELLINGS: dict[str, RoutingStrategy] = {
    "random": RoutingStrategy.RANDOM,
    "roundrobin": RoutingStrategy.ROUNDROBIN,
    "round_robin": RoutingStrategy.ROUNDROBIN,
    "leastoutstanding": RoutingStrategy.LEASTOUTSTANDING,
    "least_outstanding_requests": RoutingStrategy.LEASTOUTSTANDING,
    "least_outstanding": RoutingStrategy.LEASTOUTSTANDING,
    "session": RoutingStrategy.SESSION,
    "prefixaware": RoutingStrategy.PREFIXAWARE,
    "prefix_aware": RoutingStrategy.PREFIXAWARE,
    "kvaware": RoutingStrategy.KVAWARE,
    "kv_aware": RoutingStrategy.KVAWARE,
}


def parse(value: str | RoutingStrategy) -> RoutingStrategy:
    """The strategy an accepted spelling names (matched lower-cased, with '-' read as '_'); ValueError otherwise."""
    if isinstance(value, RoutingStrategy):
        return value
    key = str(value).strip().lower().replace("-", "_")
    if key not in SPELLINGS:
        raise ValueError(f"unknown routing strategy {value!r}; accepted: {', '.join(sorted(SPELLINGS))}")
    return SPELLINGS[key]


def served(strategy: RoutingStrategy) -> RoutingStrategy:
    """The strategy actually run: `kvaware` is accepted but served by `prefixaware`."""
    return RoutingStrategy.PREFIXAWARE if strategy is RoutingStrategy.KVAWARE else strategy


#: A model field holding a strategy: any accepted spelling in, the strategy out; its schema lists the spellings.
RoutingStrategyField = Annotated[
    RoutingStrategy,
    BeforeValidator(parse),
    WithJsonSchema({"type": "string", "enum": list(SPELLINGS)}),
]
