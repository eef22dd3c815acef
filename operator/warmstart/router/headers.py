"""Which headers cross the proxy: hop-by-hop ones stop here, encodings pass untouched, X-Forwarded-For grows.

Content encodings are end to end: the client's ``Accept-Encoding`` goes to the replica as sent
(``identity`` when it sent none, so the replica never compresses unasked), and the replica's
``Content-Encoding`` comes back with the bytes exactly as the replica sent them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
#: Request headers the client session recomputes.
_RECOMPUTED_REQUEST = frozenset({"host", "content-length", "expect"})
#: Response headers the server recomputes.
_RECOMPUTED_RESPONSE = frozenset({"content-length", "server", "date"})


def _connection_tokens(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> set[str]:
    """Header names listed in ``Connection`` (they are hop-by-hop for this hop)."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    names: set[str] = set()
    for key, value in items:
        if key.lower() == "connection":
            names.update(token.strip().lower() for token in value.split(",") if token.strip())
    return names


#: Request headers that never reach the replica (hop-by-hop or recomputed by the client session).
_DROP_REQUEST = HOP_BY_HOP | _RECOMPUTED_REQUEST
#: Response headers that never reach the client.
_DROP_RESPONSE = HOP_BY_HOP | _RECOMPUTED_RESPONSE


def upstream_request_headers(items: Iterable[tuple[str, str]], peer: str | None) -> dict[str, str]:
    """Headers to send to the replica for a client request with headers ``items`` from ``peer``."""
    pairs = items if isinstance(items, list | tuple) else list(items)
    drop = _DROP_REQUEST
    headers: dict[str, str] = {}
    forwarded: list[str] = []
    encoding = False
    for key, value in pairs:
        lower = key.lower()
        if lower in drop:
            if lower == "connection":  # the names it lists are hop-by-hop too (one pass, rare)
                drop = _DROP_REQUEST | _connection_tokens(pairs)
            continue
        if lower == "x-forwarded-for":
            forwarded.append(value)
            continue
        encoding = encoding or lower == "accept-encoding"
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if drop is not _DROP_REQUEST:  # drop what ``Connection`` named, wherever it came in the list
        headers = {key: value for key, value in headers.items() if key.lower() not in drop}
        encoding = any(key.lower() == "accept-encoding" for key in headers)
    if peer:
        forwarded.append(peer)
    if forwarded:
        headers["X-Forwarded-For"] = ", ".join(forwarded)
    if not encoding:
        headers["Accept-Encoding"] = "identity"
    return headers


def client_response_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers of the replica's response to pass back (``Content-Encoding`` included)."""
    pairs = items if isinstance(items, list | tuple) else list(items)
    drop = _DROP_RESPONSE
    if any(key.lower() == "connection" for key, _ in pairs):
        drop = drop | _connection_tokens(pairs)
    return [(key, value) for key, value in pairs if key.lower() not in drop]


# ---- the same rules on raw header bytes (the traffic server's and upstream pool's form)

_HOP_BY_HOP_BYTES = frozenset(name.encode() for name in HOP_BY_HOP)
_DROP_REQUEST_BYTES = _HOP_BY_HOP_BYTES | frozenset(name.encode() for name in _RECOMPUTED_REQUEST)
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
