"""The endpoint picker's protocol rules as pure functions: subset hints, pick lists, refusals, served endpoints.

A gateway that follows the Gateway API Inference Extension's endpoint picker protocol names
endpoints ``ip:port`` (``[ip]:port`` for IPv6); the router's fleet names replicas by URL
(``http://ip:port``). This module converts between the two, reads the subset hint and the served
endpoint from the request's filter metadata (already converted to plain Python values), and turns
the policy's ordered candidates into the pick list the gateway tries in order, or a refusal with
the HTTP status the protocol asks for. No I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: The header and the ``envoy.lb`` dynamic-metadata key carrying the pick list.
DESTINATION_ENDPOINT = "x-gateway-destination-endpoint"
#: The metadata namespace of the pick (set by the picker) and of the served endpoint (set by the gateway).
LB_NAMESPACE = "envoy.lb"
#: The metadata namespace and key of the gateway's subset hint.
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
#: The ``envoy.lb`` key naming the endpoint that really served the request.
SERVED_KEY = "x-gateway-destination-endpoint-served"


class Reason(str, enum.Enum):
    """Why the picker answers the request itself instead of naming an endpoint."""

    BAD_REQUEST = "BadRequest"
    BODY_TOO_LARGE = "BodyTooLarge"
    BUSY = "BufferFull"
    NO_ENDPOINT = "NoReadyEndpoint"
    SUBSET_EMPTY = "SubsetHintEmpty"
    SUBSET_UNMATCHED = "SubsetHintUnmatched"
    OVERLOADED = "Overloaded"
    UNSUPPORTED_MODE = "UnsupportedProcessingMode"

    @property
    def outcome(self) -> str:
        """The ``outcome`` label of ``warmstart_router_requests_total`` (the proxy's names for the same cases)."""
        if self in (Reason.NO_ENDPOINT, Reason.SUBSET_EMPTY, Reason.SUBSET_UNMATCHED):
            return "no_replica"
        if self is Reason.OVERLOADED:
            return "overflow"
        return "bad_request"


@dataclass(frozen=True, slots=True)
class Refused:
    """An immediate answer: the HTTP status, a CamelCase reason and a message safe to show the client."""

    status: int
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Picked:
    """The replicas to try, in order (fleet URLs); :attr:`value` is what goes on the wire."""

    urls: tuple[str, ...]

    @property
    def value(self) -> str:
        """``ip:port[,ip:port...]``: the header and the dynamic metadata carry this same string."""
        return ",".join(endpoint_of(url) for url in self.urls)


def endpoint_of(url: str) -> str:
    """``http://10.0.0.7:8000`` -> ``10.0.0.7:8000`` (``[fd00::7]:8000`` for IPv6)."""
    return urlsplit(url).netloc if "://" in url else url.strip().rstrip("/")


def _split(value: object) -> list[str]:
    """A hint value (``"a:1,b:2"``, or a list of such strings) -> its trimmed, non-empty entries."""
    items: Iterable[object] = value if isinstance(value, list) else [value]
    entries: list[str] = []
    for item in items:
        if isinstance(item, str):
            entries.extend(part.strip() for part in item.split(",") if part.strip())
    return entries


def subset_hint(filter_metadata: Mapping[str, Any]) -> list[str] | None:
    """The endpoints of the gateway's subset hint; None when the request carries no hint at all.

    The value is a list of ``ip:port`` strings or one comma-separated string (gateways write
    either); an entry without a port allows every port of that address.
    """
    namespace = filter_metadata.get(SUBSET_NAMESPACE)
    if not isinstance(namespace, Mapping) or SUBSET_KEY not in namespace:
        return None
    return _split(namespace[SUBSET_KEY])


def _host_port(endpoint: str) -> tuple[str, str | None]:
    """``10.0.0.7:8000`` -> (``10.0.0.7``, ``8000``); ``10.0.0.7`` or ``fd00::7`` -> (address, None)."""
    if endpoint.startswith("["):
        host, _, rest = endpoint[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") and rest[1:] else None
    if endpoint.count(":") == 1:
        host, _, port = endpoint.partition(":")
        return host, port or None
    return endpoint, None


def within(hint: Collection[str], urls: Iterable[str]) -> frozenset[str]:
    """The fleet URLs that the hint's endpoints name (by address and port, or by address alone)."""
    ports: dict[str, set[str | None]] = {}
    for entry in hint:
        host, port = _host_port(entry)
        ports.setdefault(host, set()).add(port)
    matched = set()
    for url in urls:
        host, port = _host_port(endpoint_of(url))
        allowed = ports.get(host)
        if allowed is not None and (None in allowed or port in allowed):
            matched.add(url)
    return frozenset(matched)


def served_endpoint(filter_metadata: Mapping[str, Any]) -> str | None:
    """The endpoint the gateway reports as the one that served the request, when it reports one."""
    namespace = filter_metadata.get(LB_NAMESPACE)
    if not isinstance(namespace, Mapping):
        return None
    value = namespace.get(SERVED_KEY)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.split(",", 1)[0].strip()


def url_in(endpoint: str, urls: Iterable[str]) -> str | None:
    """The fleet URL whose endpoint is ``endpoint``, if any."""
    for url in urls:
        if endpoint_of(url) == endpoint:
            return url
    return None


def unavailable(hinted: bool) -> Refused:
    """The 503 for no eligible endpoint: none in the subset hint (``hinted``), or none at all."""
    if hinted:
        return Refused(503, Reason.SUBSET_UNMATCHED, "no ready endpoint in the gateway's subset hint")
    return Refused(503, Reason.NO_ENDPOINT, "no ready model replicas behind this endpoint picker")


def pick(
    candidates: Iterable[str], inflight: Mapping[str, int], cap: int | None, retries: int, hinted: bool
) -> Picked | Refused:
    """The first candidates under the concurrency cap, at most ``1 + retries`` of them, in the policy's order.

    ``inflight`` has the candidates' current counts; ``hinted`` says the candidates were
    restricted by a subset hint (every one of them at the cap is then overload, not absence).
    """
    ordered = list(candidates)
    if not ordered:
        return unavailable(hinted)
    under = [url for url in ordered if cap is None or inflight.get(url, 0) < cap]
    if not under:
        return Refused(429, Reason.OVERLOADED, "every eligible model replica is at its concurrency limit; retry later")
    return Picked(tuple(under[: 1 + retries]))
