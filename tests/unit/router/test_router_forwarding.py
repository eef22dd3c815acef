"""Who the client is behind trusted proxies (``trustedProxies``), and the X-Forwarded-For the router sends on.

Pure functions: no sockets. The rules: an untrusted peer is the client whatever it sends; a trusted peer's chain is
read from the right, trusted hops skipped; a chain the router cannot read, or none, leaves the peer as the client.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from warmstart.api.routers import RouterConfig
from warmstart.router.forwarding import MAX_HOPS, Origin, TrustedProxies, origin
from warmstart.router.headers import forwarded_request_headers

LB = "10.0.0.5"
TRUSTED = TrustedProxies(["10.0.0.0/24", "192.168.7.1", "fd00:1::/64"])


def test_without_trusted_proxies_the_peer_is_the_client_whatever_it_sends() -> None:
    assert origin(LB, [b"203.0.113.9"], TrustedProxies()) == Origin(LB)


def test_an_untrusted_peer_cannot_pick_its_share_key_with_a_forged_header() -> None:
    assert origin("198.51.100.7", [b"203.0.113.9"], TRUSTED) == Origin("198.51.100.7")
    assert origin("198.51.100.7", [b"10.0.0.9, 203.0.113.9"], TRUSTED) == Origin("198.51.100.7")


def test_a_trusted_peer_forwards_for_the_last_hop() -> None:
    assert origin(LB, [b"203.0.113.9"], TRUSTED) == Origin("203.0.113.9", ("203.0.113.9",))


def test_hops_left_of_the_first_untrusted_one_are_the_clients_own_claims_and_ignored() -> None:
    # the client wrote 10.0.0.9 (a trusted address) and 1.2.3.4 itself; the balancer appended what it saw
    found = origin(LB, [b"10.0.0.9, 1.2.3.4, 203.0.113.9"], TRUSTED)
    assert found == Origin("203.0.113.9", ("203.0.113.9",))


def test_a_chain_of_trusted_proxies_is_skipped_from_the_right() -> None:
    found = origin(LB, [b"203.0.113.9, 192.168.7.1, 10.0.0.7"], TRUSTED)
    assert found == Origin("203.0.113.9", ("203.0.113.9", "192.168.7.1", "10.0.0.7"))


def test_when_every_hop_is_trusted_the_leftmost_is_the_client() -> None:
    assert origin(LB, [b"10.0.0.8, 10.0.0.7"], TRUSTED) == Origin("10.0.0.8", ("10.0.0.8", "10.0.0.7"))


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b" , ",
        b"unknown",
        b"203.0.113.9, not-an-address",
        b"203.0.113.9, 10.0.0.7:8080",
        b"[2001:db8::1",
        b"300.1.1.1",
    ],
)
def test_a_missing_or_unreadable_chain_leaves_the_peer_as_the_client(value: bytes) -> None:
    assert origin(LB, [value], TRUSTED) == Origin(LB)
    assert origin(LB, [], TRUSTED) == Origin(LB)


def test_an_unreadable_hop_left_of_the_client_is_never_read() -> None:
    assert origin(LB, [b"garbage, 203.0.113.9"], TRUSTED) == Origin("203.0.113.9", ("203.0.113.9",))


def test_a_longer_chain_of_trusted_hops_than_the_limit_is_not_believed() -> None:
    within = ", ".join(["203.0.113.9"] + ["10.0.0.7"] * (MAX_HOPS - 1)).encode()
    beyond = ", ".join(["203.0.113.9"] + ["10.0.0.7"] * MAX_HOPS).encode()
    assert origin(LB, [within], TRUSTED).client == "203.0.113.9"
    assert origin(LB, [beyond], TRUSTED) == Origin(LB)


def test_ipv6_peers_hops_and_bracketed_forms() -> None:
    assert origin("fd00:1::5", [b"2001:db8::1"], TRUSTED) == Origin("2001:db8::1", ("2001:db8::1",))
    assert origin(LB, [b"[2001:DB8::1]:443"], TRUSTED).client == "2001:db8::1"
    assert origin(LB, [b"[2001:db8::1]"], TRUSTED).client == "2001:db8::1"
    assert origin(LB, [b"2001:db8::1, fd00:1::9"], TRUSTED).client == "2001:db8::1"
    assert origin("fd00:2::5", [b"2001:db8::1"], TRUSTED) == Origin("fd00:2::5")


def test_ipv4_mapped_ipv6_is_its_ipv4_address() -> None:
    # a dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d
    assert origin("::ffff:10.0.0.5", [b"::ffff:203.0.113.9"], TRUSTED) == Origin("203.0.113.9", ("203.0.113.9",))


def test_several_fields_are_one_list_in_order() -> None:
    # RFC 7230 section 3.2.2: "a, b" in one field equals a field "a" followed by a field "b"
    split = origin(LB, [b"203.0.113.9", b"192.168.7.1,10.0.0.7"], TRUSTED)
    assert split == origin(LB, [b"203.0.113.9, 192.168.7.1, 10.0.0.7"], TRUSTED)
    assert split.client == "203.0.113.9"
    assert origin(LB, [b"10.0.0.8", b"203.0.113.9"], TRUSTED).client == "203.0.113.9"  # the last field is nearest


def test_the_replica_gets_the_believed_chain_then_the_peer() -> None:
    pairs = [(b"x-forwarded-for", b"1.2.3.4, 203.0.113.9"), (b"x-real-ip", b"1.2.3.4"), (b"host", b"r")]
    found = origin(LB, [pairs[0][1]], TRUSTED)
    sent = forwarded_request_headers(pairs, LB, found.hops)
    assert [value for key, value in sent if key == b"x-forwarded-for"] == [b"203.0.113.9, 10.0.0.5"]
    assert b"x-real-ip" not in [key for key, _ in sent]
    untrusted = forwarded_request_headers(pairs, "198.51.100.7", origin("198.51.100.7", [pairs[0][1]], TRUSTED).hops)
    assert [value for key, value in untrusted if key == b"x-forwarded-for"] == [b"198.51.100.7"]


def test_trusted_proxies_are_addresses_or_networks_without_host_bits() -> None:
    config = RouterConfig.from_yaml("trustedProxies: ['10.0.0.0/8', ' 192.168.7.1 ', 'FD00::/8']")
    assert config.trusted_proxies == ("10.0.0.0/8", "192.168.7.1/32", "fd00::/8")
    for bad in ("10.0.0.1/8", "envoy.internal", "10.0.0.0/33"):
        with pytest.raises(ValidationError, match="trustedProxies"):
            RouterConfig(trusted_proxies=(bad,))
