"""The peer-sync wire format: one router's picks and in-flight counts as an authenticated two-frame message.

A message is ``[payload, mac]``:

- ``payload`` is msgpack of ``[version, sender, seq, sent_ms, inflight, picks]``: ``sender`` an
  8-byte id the router draws at start, ``seq`` its message counter (1, 2, ...), ``sent_ms`` its
  wall clock in milliseconds, ``inflight`` a map ``replica URL -> requests it has in flight
  there`` (absolute, replicas at 0 left out), and ``picks`` the placements since its previous
  message, each ``[replica URL, text block keys, anchor or nil, token block keys or nil]``;
- ``mac`` is HMAC-SHA256 of ``payload`` under the endpoint's sync key.

:func:`decode` checks sizes before anything else, then the MAC (in constant time), then the
shape and every bound, and raises :class:`Rejected` with a reason (a metric label) on the first
failure; nothing of a rejected message is used. Replay and rate checks need the receiver's state
and live in :mod:`warmstart.router.peerstate`.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import sys
from array import array
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

VERSION = 1
SENDER_BYTES = 8
#: the largest payload accepted (also the transport's message size limit)
MAX_PAYLOAD_BYTES = 256 * 1024
MAC_BYTES = 32
#: placements in one message; a router batches a few milliseconds of picks
MAX_PICKS = 512
#: text or token block keys in one pick (RouterConfig.maxBlocks is at most 4096)
MAX_BLOCKS = 4096
#: replicas named in one message's in-flight map
MAX_REPLICAS = 1024
MAX_URL_CHARS = 256
_U64 = 2**64
_SWAP = sys.byteorder != "little"


class Reason(str, enum.Enum):
    """Why a peer message was dropped (the ``reason`` label of the dropped-messages counter)."""

    OVERSIZED = "oversized"
    FORGED = "forged"
    MALFORMED = "malformed"
    REPLAYED = "replayed"
    STALE = "stale"
    FLOOD = "flood"


class Rejected(Exception):
    """A message that is dropped, and why."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class Pick(NamedTuple):
    """One placement: the replica and the request's keys (what the policy's ``placed`` records)."""

    replica: str
    blocks: tuple[int, ...]
    anchor: int | None = None
    token_blocks: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One router's news: who, which message, when, its in-flight counts and its new picks."""

    sender: bytes
    seq: int
    sent_ms: int
    inflight: dict[str, int]
    picks: tuple[Pick, ...] = ()


def mac(key: bytes, payload: bytes) -> bytes:
    return hmac.digest(key, payload, hashlib.sha256)


def pack_keys(keys: tuple[int, ...]) -> bytes:
    """64-bit unsigned keys as little-endian bytes."""
    packed = array("Q", keys)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def unpack_keys(data: bytes) -> tuple[int, ...]:
    """The keys :func:`pack_keys` packed; :class:`Rejected` for a length that is not a whole number of keys."""
    if len(data) % 8 or len(data) > MAX_BLOCKS * 8:
        raise Rejected(Reason.MALFORMED)
    packed = array("Q")
    packed.frombytes(data)
    if _SWAP:
        packed.byteswap()
    return tuple(packed)


def encode(message: Message, key: bytes) -> list[bytes]:
    """The two frames of ``message``, authenticated with ``key``."""
    picks = [
        [p.replica, pack_keys(p.blocks), p.anchor, None if p.token_blocks is None else pack_keys(p.token_blocks)]
        for p in message.picks
    ]
    payload = msgpack.packb(
        [VERSION, message.sender, message.seq, message.sent_ms, message.inflight, picks], use_bin_type=True
    )
    return [payload, mac(key, payload)]


def decode(frames: list[bytes], key: bytes) -> Message:
    """The message in ``frames`` if it is authentic and well formed; else :class:`Rejected`."""
    if len(frames) != 2:
        raise Rejected(Reason.MALFORMED)
    payload, tag = frames
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise Rejected(Reason.OVERSIZED)
    if len(tag) != MAC_BYTES or not hmac.compare_digest(mac(key, payload), tag):
        raise Rejected(Reason.FORGED)
    try:
        fields = msgpack.unpackb(payload, raw=False, strict_map_key=True, max_bin_len=MAX_BLOCKS * 8)
        return _message(fields)
    except Rejected:
        raise
    except Exception as exc:
        raise Rejected(Reason.MALFORMED) from exc


def _message(fields: Any) -> Message:
    if not isinstance(fields, list) or len(fields) != 6 or fields[0] != VERSION:
        raise Rejected(Reason.MALFORMED)
    _, sender, seq, sent_ms, inflight, picks = fields
    if not (isinstance(sender, bytes) and len(sender) == SENDER_BYTES):
        raise Rejected(Reason.MALFORMED)
    if not (_uint(seq) and seq > 0 and _uint(sent_ms)):
        raise Rejected(Reason.MALFORMED)
    if not isinstance(inflight, dict) or len(inflight) > MAX_REPLICAS:
        raise Rejected(Reason.MALFORMED)
    for url, count in inflight.items():
        if not (_url(url) and type(count) is int and count >= 0):
            raise Rejected(Reason.MALFORMED)
    if not isinstance(picks, list) or len(picks) > MAX_PICKS:
        raise Rejected(Reason.MALFORMED)
    return Message(sender, seq, sent_ms, inflight, tuple(_pick(p) for p in picks))


def _pick(item: Any) -> Pick:
    if not isinstance(item, list) or len(item) != 4:
        raise Rejected(Reason.MALFORMED)
    replica, blocks, anchor, token_blocks = item
    if not _url(replica) or not isinstance(blocks, bytes) or not (anchor is None or _uint(anchor)):
        raise Rejected(Reason.MALFORMED)
    if token_blocks is not None and not isinstance(token_blocks, bytes):
        raise Rejected(Reason.MALFORMED)
    return Pick(replica, unpack_keys(blocks), anchor, None if token_blocks is None else unpack_keys(token_blocks))


def _uint(value: Any) -> bool:
    return type(value) is int and 0 <= value < _U64


def _url(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_URL_CHARS
