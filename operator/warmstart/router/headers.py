"""Which headers cross the proxy: hop-by-hop ones stop here, encodings pass untouched, forwarding headers are ours.

Headers are handled as the raw bytes the parsers give (request names lowercased by the server).

The router is the first proxy that a replica can trust, so the forwarding headers a client sends
(``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``) are dropped, and the replica gets the router's own:
``X-Forwarded-For`` is the client's address as the router's socket sees it, ``X-Forwarded-Proto``
is ``http`` (the traffic port speaks plain HTTP). Behind a proxy in ``trustedProxies``, the
``X-Forwarded-For`` hops the router believes (from the client it identified on,
:mod:`warmstart.router.forwarding`) come first and the socket's peer is appended, as a proxy does;
hops left of that client, and every other forwarding header, are dropped as before.

Content encodings are end to end: the client's ``Accept-Encoding`` goes to the replica as sent
(``identity`` when it sent none, so the replica never compresses unasked), and the replica's
``Content-Encoding`` comes back with the bytes exactly as the replica sent them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Hop-by-hop headers (RFC 9110 section 7.6.1, plus the legacy proxy ones): never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_HOP_BY_HOP_BYTES = frozenset(name.encode() for name in HOP_BY_HOP)
#: Forwarding headers a client may not set: the router writes its own or none.
FORWARDING = frozenset(
    {
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-port",
        "x-forwarded-prefix",
        "x-forwarded-proto",
        "x-forwarded-server",
        "x-real-ip",
    }
)
#: Request headers that never reach the replica (hop-by-hop, or written by the router itself).
_DROP_REQUEST_BYTES = (
    _HOP_BY_HOP_BYTES | {name.encode() for name in FORWARDING} | {b"host", b"content-length", b"expect"}
)
#: Response headers that never reach the client from the raw relay (it frames the body itself).
_DROP_RELAYED = _HOP_BY_HOP_BYTES | {b"content-length"}


def _connection_token_bytes(pairs: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    names: set[bytes] = set()
    for key, value in pairs:
        if key.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return frozenset(names)


def forwarded_request_headers(
    pairs: list[tuple[bytes, bytes]], peer: str | None, hops: Sequence[str] = ()
) -> list[tuple[bytes, bytes]]:
    """Headers (lowercased names) to send to the replica for a client request with lowercased ``pairs`` from
    ``peer``, which forwards it for the believed ``hops`` (none: ``peer`` is the client)."""
    drop = _DROP_REQUEST_BYTES
    for key, _ in pairs:
        if key == b"connection":
            drop = drop | _connection_token_bytes(pairs)
            break
    headers: list[tuple[bytes, bytes]] = []
    encoding = False
    for key, value in pairs:
        if key in drop:
            continue
        encoding = encoding or key == b"accept-encoding"
        headers.append((key, value))
    chain = [*hops, peer] if peer else list(hops)
    if chain:
        headers.append((b"x-forwarded-for", ", ".join(chain).encode()))
    headers.append((b"x-forwarded-proto", b"http"))
    if not encoding:
        headers.append((b"accept-encoding", b"identity"))
    return headers


def relayed_response_headers(pairs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Headers of the replica's response to pass back as they came, less hop-by-hop ones and its framing."""
    drop = _DROP_RELAYED
    for key, _ in pairs:
        if key.lower() == b"connection":
            drop = drop | _connection_token_bytes(pairs)
            break
    return [(key, value) for key, value in pairs if key.lower() not in drop]
