"""Who the client is: the TCP peer, or behind proxies the admin trusts, the first untrusted hop of X-Forwarded-For.

The per-client shares (:mod:`warmstart.router.reading`, the parse round of
:mod:`warmstart.router.bodies`) key on the client. Behind a load balancer every client is the
balancer's address, so the router reads ``X-Forwarded-For`` when, and only when, the TCP peer is
one of ``trustedProxies``: its hops are read from the right (the nearest first), trusted hops are
skipped, and the first untrusted one is the client. Anyone can write the header, so from an
untrusted peer it is ignored (the client would pick its own share key), and a chain with an entry
that is not an IP address, more than :data:`MAX_HOPS` trusted hops, or no chain at all leaves the
peer as the client. Several ``X-Forwarded-For`` fields are one comma-separated list, in order, and
empty list elements are ignored (RFC 7230 sections 3.2.2 and 7).

What the router forwards is :attr:`Origin.hops` followed by the peer: the hops from the client on,
as a proxy appends its peer to the chain it trusts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Hops read from the right at most: a longer chain of trusted hops is not believed (it costs a parse per hop).
MAX_HOPS = 32


def network(entry: str) -> Network:
    """An address or CIDR of ``trustedProxies`` as a network; ValueError for anything else (host bits set too)."""
    return ipaddress.ip_network(entry.strip())


def address(text: str) -> Address | None:
    """One hop (``1.2.3.4``, ``2001:db8::1``, ``[2001:db8::1]``, ``[2001:db8::1]:443``) as an address, IPv4-mapped
    IPv6 as IPv4; None when it is not one."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not (end == len(text) - 1 or (text[end + 1 : end + 2] == ":" and text[end + 2 :].isdigit())):
            return None
        text = text[1:end]
    try:
        parsed = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


class TrustedProxies:
    """The proxies whose ``X-Forwarded-For`` the router believes (empty: none, the peer is always the client)."""

    __slots__ = ("networks",)

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.networks = tuple(network(entry) for entry in entries)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, hop: Address) -> bool:
        return any(hop in net for net in self.networks)


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sent a request, as the router decides it."""

    client: str | None
    """The client whose shares the request counts against: the TCP peer, or the hop it was forwarded for."""

    hops: tuple[str, ...] = ()
    """The forwarded chain the router believes, from the client to the hop before the peer (empty when the peer is
    the client)."""


def origin(peer: str | None, forwarded_for: Sequence[bytes], trusted: TrustedProxies) -> Origin:
    """The client of a request from TCP ``peer`` carrying the ``X-Forwarded-For`` field values ``forwarded_for``."""
    if not trusted or peer is None or not forwarded_for:
        return Origin(peer)
    peer_address = address(peer)
    if peer_address is None or not trusted.trusts(peer_address):
        return Origin(peer)
    hops = [text for text in b",".join(forwarded_for).decode("latin-1").split(",") if text.strip()]
    believed: list[str] = []
    for text in reversed(hops):
        hop = address(text)
        if hop is None or len(believed) == MAX_HOPS:
            return Origin(peer)  # a chain the router cannot read names no client
        believed.append(str(hop))
        if not trusted.trusts(hop):
            break
    if not believed:
        return Origin(peer)
    # the first untrusted hop from the right; when every hop is trusted, the leftmost (the request began there)
    return Origin(believed[-1], tuple(reversed(believed)))
