"""Decode vLLM's KV-cache event batches, tolerating every encoding vLLM has shipped.

A batch arrives as the msgpack payload of ``(topic, 8-byte big-endian seq, payload)``. vLLM has
encoded it two ways, and engines of one fleet may differ:

* msgspec positional arrays: the batch ``[ts, events, data_parallel_rank]`` and each event
  ``[tag, field, ...]`` (``BlockStored``: block_hashes, parent_block_hash, token_ids, block_size,
  lora_id, medium, lora_name, extra_keys, ...; ``BlockRemoved``: block_hashes, medium, ...;
  ``AllBlocksCleared``), trailing defaults omitted;
* maps: ``{"ts", "events", "data_parallel_rank"}`` and ``{"type": tag, field: value, ...}``.

Both levels accept both forms; unknown fields and unknown event types are ignored; block hashes
may be integers or bytes. Blocks the router cannot key by token ids alone (a LoRA adapter's,
blocks with extra keys such as multimodal hashes or a cache salt, blocks on another medium than
the GPU) are reported as :class:`Unkeyable` so that their children are not mistaken for plain
prompt blocks. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

EngineHash = int | bytes
"""A block hash as the engine publishes it (an int by default, raw digest bytes otherwise)."""

_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name")
_STORED_EXTRA = "extra_keys"
_STORED_EXTRA_POSITION = 7
_REMOVED_FIELDS = ("block_hashes", "medium")
_GPU = ("GPU", "gpu", None)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class DecodeError(ValueError):
    """The payload is not a KV-event batch in any known encoding."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks the engine now holds: ``token_ids`` covers ``len(block_hashes) x block_size`` tokens."""

    block_hashes: tuple[EngineHash, ...]
    parent_block_hash: EngineHash | None
    token_ids: tuple[int, ...]
    block_size: int


@dataclass(frozen=True, slots=True)
class Unkeyable:
    """Blocks stored that the router does not index (LoRA, extra keys, another medium)."""

    block_hashes: tuple[EngineHash, ...]


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks the engine evicted (GPU medium only)."""

    block_hashes: tuple[EngineHash, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine dropped its whole prefix cache."""


Event = BlockStored | Unkeyable | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class Batch:
    """One published batch: its publisher timestamp (seconds since the epoch) and events."""

    ts: float
    events: tuple[Event, ...]
    skipped: int = 0
    """Events of an unknown type or shape, ignored."""


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _hash(value: Any) -> EngineHash:
    if isinstance(value, bool) or not isinstance(value, int | bytes):
        raise DecodeError("a block hash is neither an integer nor bytes")
    return value


def _hashes(value: Any) -> tuple[EngineHash, ...]:
    if not isinstance(value, list | tuple):
        raise DecodeError("block_hashes is not a list")
    return tuple(_hash(item) for item in value)


def _fields(raw: Any, names: tuple[str, ...]) -> tuple[str | None, dict[str, Any]]:
    """(type tag, fields by name) of an event in array or map form."""
    if isinstance(raw, dict):
        fields = {(_text(k) or ""): v for k, v in raw.items()}
        return _text(fields.pop("type", None)), fields
    if isinstance(raw, list | tuple) and raw:
        values = list(raw[1:])
        fields = dict(zip(names, values, strict=False))
        if names is _STORED_FIELDS and len(values) > _STORED_EXTRA_POSITION:
            fields[_STORED_EXTRA] = values[_STORED_EXTRA_POSITION]
        return _text(raw[0]), fields
    raise DecodeError("an event is neither an array nor a map")


def _tag(raw: Any) -> str | None:
    if isinstance(raw, dict):
        for key, value in raw.items():
            if _text(key) == "type":
                return _text(value)
        return None
    if isinstance(raw, list | tuple) and raw:
        return _text(raw[0])
    return None


def decode_event(raw: Any) -> Event | None:
    """One event, or None for an unknown type (ignored)."""
    tag = _tag(raw)
    if tag == "BlockStored":
        _, f = _fields(raw, _STORED_FIELDS)
        hashes = _hashes(f.get("block_hashes"))
        parent = f.get("parent_block_hash")
        medium = _text(f.get("medium"))
        extra = f.get(_STORED_EXTRA)
        keyed = f.get("lora_id") is None and f.get("lora_name") is None and medium in _GPU
        if extra is not None and isinstance(extra, list | tuple) and any(e is not None for e in extra):
            keyed = False
        if not keyed:
            return Unkeyable(hashes) if medium in _GPU else None
        tokens = f.get("token_ids")
        size = f.get("block_size")
        if not isinstance(tokens, list | tuple) or not isinstance(size, int) or size <= 0:
            raise DecodeError("BlockStored without token_ids or block_size")
        if len(tokens) != len(hashes) * size:
            raise DecodeError("BlockStored token_ids do not fill its blocks")
        if not all(type(token) is int and _INT64[0] <= token <= _INT64[1] for token in tokens):
            raise DecodeError("BlockStored token_ids are not 64-bit integers")
        return BlockStored(hashes, None if parent is None else _hash(parent), tuple(tokens), size)
    if tag == "BlockRemoved":
        _, f = _fields(raw, _REMOVED_FIELDS)
        if _text(f.get("medium")) not in _GPU:
            return None
        return BlockRemoved(_hashes(f.get("block_hashes")))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_batch(payload: bytes) -> Batch:
    """A whole batch from its msgpack payload (:class:`DecodeError` if it is not one)."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False, unicode_errors="replace")
    except (ValueError, msgpack.UnpackException) as exc:
        raise DecodeError(f"not msgpack: {type(exc).__name__}") from None
    if isinstance(raw, dict):
        fields = {_text(k): v for k, v in raw.items()}
        ts, events = fields.get("ts"), fields.get("events")
    elif isinstance(raw, list | tuple) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
    else:
        raise DecodeError("a batch is neither an array nor a map")
    if not isinstance(events, list | tuple):
        raise DecodeError("a batch has no event list")
    decoded: list[Event] = []
    skipped = 0
    for item in events:
        try:
            event = decode_event(item)
        except DecodeError:
            event = None
        if event is None:
            skipped += 1
        else:
            decoded.append(event)
    return Batch(
        float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else 0.0, tuple(decoded), skipped
    )


def decode_seq(frame: bytes) -> int:
    """The 8-byte big-endian sequence number (signed: the replay end marker is -1)."""
    if len(frame) != 8:
        raise DecodeError("a sequence frame is not 8 bytes")
    return int.from_bytes(frame, "big", signed=True)
