"""vLLM's KV-cache event batches as the router reads them: the event types and their decoders.

A batch arrives as the msgpack payload of ``(topic, 8-byte big-endian seq, payload)``. vLLM has
encoded it two ways, and engines of one fleet may differ:

* msgspec positional arrays: the batch ``[ts, events, data_parallel_rank]`` and each event
  ``[tag, field, ...]`` (``BlockStored``: block_hashes, parent_block_hash, token_ids, block_size,
  lora_id, medium, lora_name, extra_keys, ...; ``BlockRemoved``: block_hashes, medium, ...;
  ``AllBlocksCleared``), trailing defaults omitted;
* maps: ``{"ts", "events", "data_parallel_rank"}`` and ``{"type": tag, field: value, ...}``.

Both levels accept both forms; unknown fields and unknown event types are ignored; block hashes
may be integers or bytes. Blocks the router cannot key by token ids alone (a LoRA adapter's,
blocks with extra keys such as multimodal hashes or a cache salt) are reported as
:class:`Unkeyable` so that their children are not mistaken for plain prompt blocks; blocks on
another medium than the GPU are ignored. A malformed event is skipped (counted in
``Batch.skipped``); a payload that is no batch at all raises :class:`DecodeError`. The decoding
is the routing core's (compiled, :mod:`warmstart._routing_core`); this module names it.
"""

from __future__ import annotations

from warmstart._routing_core import (
    AllBlocksCleared,
    Batch,
    BlockRemoved,
    BlockStored,
    DecodeError,
    Unkeyable,
    decode_batch,
    decode_seq,
)

EngineHash = int | bytes
"""A block hash as the engine publishes it (an int by default, raw digest bytes otherwise)."""

Event = BlockStored | Unkeyable | BlockRemoved | AllBlocksCleared
"""One decoded event."""

__all__ = [
    "AllBlocksCleared",
    "Batch",
    "BlockRemoved",
    "BlockStored",
    "DecodeError",
    "EngineHash",
    "Event",
    "Unkeyable",
    "decode_batch",
    "decode_seq",
]
