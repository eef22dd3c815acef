"""Which headers cross the proxy: hop-by-hop ones stop here, encodings pass untouched, X-Forwarded-For grows.

Headers are handled as the raw bytes the parsers give (request names lowercased by the server).

Content encodings are end to end: the client's ``Accept-Encoding`` goes to the replica as sent
(``identity`` when it sent none, so the replica never compresses unasked), and the replica's
``Content-Encoding`` comes back with the bytes exactly as the replica sent them.
"""

from __future__ import annotations

from collections.abc import Iterable

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
#: Request headers that never reach the replica (hop-by-hop, or written by the router itself).
_DROP_REQUEST_BYTES = _HOP_BY_HOP_BYTES | {b"host", b"content-length", b"expect"}
#: Response headers that never reach the client from the raw relay (it frames the body itself).
_DROP_RELAYED = _HOP_BY_HOP_BYTES | {b"content-length"}


def _connection_token_bytes(pairs: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    names: set[bytes] = set()
    for key, value in pairs:
        if key.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return frozenset(names)


def forwarded_request_headers(pairs: list[tuple[bytes, bytes]], peer: str | None) -> list[tuple[bytes, bytes]]:
    """Headers (lowercased names) to send to the replica for a client request with lowercased ``pairs``."""
    drop = _DROP_REQUEST_BYTES
    for key, _ in pairs:
        if key == b"connection":
            drop = drop | _connection_token_bytes(pairs)
            break
    headers: list[tuple[bytes, bytes]] = []
    forwarded: list[bytes] = []
    encoding = False
    for key, value in pairs:
        if key in drop:
            continue
        if key == b"x-forwarded-for":
            forwarded.append(value)
            continue
        encoding = encoding or key == b"accept-encoding"
        headers.append((key, value))
    if peer:
        forwarded.append(peer.encode())
    if forwarded:
        headers.append((b"x-forwarded-for", b", ".join(forwarded)))
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
