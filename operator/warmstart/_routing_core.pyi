"""The routing core (Rust, routing-core/): hashing, prefix indexes, KV events, load accounting and the pick.

Every hash is an 8-byte BLAKE2b digest read big-endian, the same in every process. Every entry
point turns a panic inside the core into :class:`CoreError` and counts it in :func:`panics`; a
malformed KV-event payload is a :class:`DecodeError` (or a skipped event), never a crash.
Replica names are the fleet's URLs.
"""

from collections.abc import Mapping, Sequence

class DecodeError(ValueError):
    """The payload is not a KV-event batch in any known encoding."""

class CoreError(RuntimeError):
    """The routing core failed (a panic inside it); counted in :func:`panics`."""

# ---- hashing

def block_hashes(text: str, block_chars: int, max_blocks: int) -> list[int]:
    """Chained hashes of the leading full ``block_chars``-character blocks of ``text`` (at most ``max_blocks``).

    Block i hashes (block i-1's digest, or 8 zero bytes) + block i's UTF-8 bytes. Lone surrogates
    hash as U+FFFD."""

def prompt_hashes(head: str, block_chars: int, max_blocks: int) -> tuple[list[int], int | None, int]:
    """``(block hashes, conversation anchor or None, anchor end in characters)`` of a rendered prompt head.

    The anchor is the hash of a chat rendering through its first user message (None for a
    completion, or when that message ends beyond ``block_chars x max_blocks``)."""

def chain_keys(tokens: Sequence[int], block_size: int, parent: int = 0) -> list[int]:
    """The router's keys of the full ``block_size`` blocks of token ids (little-endian int64), from ``parent``."""

def stable_hash(*parts: str | int) -> int:
    """A 64-bit hash of the parts joined by NUL (integers in decimal)."""

def rendezvous_order(seed: str | int, names: Sequence[str]) -> list[str]:
    """``names`` by descending highest-random-weight score ``stable_hash(seed, name)``, ties by name."""

def load_ceiling(total_inflight: int, replicas: int, epsilon: float, min_ceiling: int) -> int:
    """``max(min_ceiling, ceil((1+epsilon) x (total_inflight + 1) / replicas))``."""

def share_bound(recent_total: float, replicas: int, epsilon: float, slack: float) -> float:
    """``(1+epsilon) x (recent_total + 1) / replicas + slack``."""

def panics() -> int:
    """Panics caught at the core's boundary since it was loaded (each raised as :class:`CoreError`)."""

def check_panic_guard(message: str) -> None:
    """Panic inside the core on purpose: raises :class:`CoreError` and counts it, as any panic would."""

# ---- KV events

EngineHash = int | bytes

class BlockStored:
    """Full blocks the engine now holds: ``token_ids`` covers ``len(block_hashes) x block_size`` tokens."""

    def __init__(
        self,
        block_hashes: Sequence[EngineHash],
        parent_block_hash: EngineHash | None,
        token_ids: Sequence[int],
        block_size: int,
    ) -> None: ...
    @property
    def block_hashes(self) -> tuple[EngineHash, ...]: ...
    @property
    def parent_block_hash(self) -> EngineHash | None: ...
    @property
    def token_ids(self) -> tuple[int, ...]: ...
    @property
    def block_size(self) -> int: ...

class Unkeyable:
    """Blocks stored that the router does not index (LoRA, extra keys)."""

    def __init__(self, block_hashes: Sequence[EngineHash]) -> None: ...
    @property
    def block_hashes(self) -> tuple[EngineHash, ...]: ...

class BlockRemoved:
    """Blocks the engine evicted (GPU medium only)."""

    def __init__(self, block_hashes: Sequence[EngineHash]) -> None: ...
    @property
    def block_hashes(self) -> tuple[EngineHash, ...]: ...

class AllBlocksCleared:
    """The engine dropped its whole prefix cache."""

    def __init__(self) -> None: ...

Event = BlockStored | Unkeyable | BlockRemoved | AllBlocksCleared

class Batch:
    """One published batch, decoded."""

    @property
    def ts(self) -> float:
        """The publisher's timestamp (seconds since the epoch; 0.0 when absent)."""
    @property
    def events(self) -> tuple[Event, ...]: ...
    @property
    def skipped(self) -> int:
        """Events of an unknown type or a malformed shape, ignored."""
    @property
    def cleared(self) -> bool:
        """The batch holds an ``AllBlocksCleared``."""
    def __len__(self) -> int: ...

def decode_batch(payload: bytes) -> Batch:
    """A whole batch from its msgpack payload, array or map form (:class:`DecodeError` if it is not one)."""

def decode_seq(frame: bytes) -> int:
    """The 8-byte big-endian signed sequence number (:class:`DecodeError` for another length)."""

# ---- indexes, shares, peers

class PrefixIndex:
    """Per-replica LRU sets of chained block hashes (``capacity_blocks`` each), with a longest-prefix lookup."""

    def __init__(self, capacity_blocks: int) -> None: ...
    @property
    def capacity_blocks(self) -> int: ...
    def match(self, blocks: Sequence[int], replicas: Sequence[str]) -> dict[str, int]:
        """Leading blocks each replica holds (only replicas with at least one)."""
    def record(self, replica: str, blocks: Sequence[int]) -> None:
        """``replica`` now holds ``blocks`` (most recently used), evicting its least recently used ones."""
    def holders(self, block: int) -> set[str]: ...
    def since(self, replica: str, block: int) -> int:
        """When ``replica`` first got ``block`` (a sequence number; smaller = earlier; 0 = never)."""
    def forget(self, replica: str) -> None: ...
    def replicas(self) -> list[str]: ...
    def blocks(self, replica: str) -> int: ...
    def total_entries(self) -> int: ...

class EventIndex:
    """Per-replica block keys from KV events (keyed by :func:`chain_keys`), plus speculative entries."""

    def __init__(self, block_size: int) -> None: ...
    @property
    def block_size(self) -> int: ...
    @property
    def orphans(self) -> int:
        """Blocks not indexed because their parent was unknown."""
    @property
    def mismatched(self) -> int:
        """Blocks not indexed because the engine's block size differs from the router's."""
    def apply(self, replica: str, event: Event) -> None: ...
    def apply_batch(self, replica: str, batch: Batch) -> None:
        """Apply every event of ``batch``, in order (without building Python event objects)."""
    def clear(self, replica: str) -> None:
        """Forget everything ``replica`` reported."""
    def speculate(self, replica: str, keys: Sequence[int], expiry: float) -> None:
        """A pick (this router's or a peer's) sent these keys to ``replica``: count them as held until
        ``expiry`` (monotonic seconds) or until ``replica``'s events confirm them, whichever comes first;
        a renewed speculation extends the expiry."""
    def expire(self, now: float) -> None: ...
    def match(self, keys: Sequence[int], replicas: Sequence[str], now: float) -> dict[str, int]:
        """Leading keys each replica holds, by events or an unexpired speculative entry."""
    def engine_hashes(self, replica: str) -> set[EngineHash]: ...
    def keys(self, replica: str) -> set[int]: ...
    def blocks(self, replica: str) -> int: ...
    def holds(self, replica: str, key: int) -> bool:
        """Whether ``replica`` reported holding ``key`` (events only)."""
    def total_entries(self) -> int: ...

class ShareMeter:
    """Decayed per-replica request counts over roughly the last ``window`` requests (decay per request)."""

    def __init__(self, window: int) -> None: ...
    def add(self, replica: str) -> None: ...
    def recent(self, replica: str) -> float: ...
    def total(self) -> float: ...
    def forget(self, replica: str) -> None: ...

class PeerLoads:
    """Peer routers' in-flight requests per replica, by peer id; :meth:`totals` is what the pickers' ``peers`` take."""

    def __init__(self) -> None: ...
    def set(self, peer: str, counts: Mapping[str, int]) -> None:
        """``peer`` now has ``counts`` requests in flight per replica (replaces its previous report)."""
    def forget(self, peer: str) -> None:
        """``peer`` is gone: its requests no longer count."""
    def inflight(self, replica: str) -> int:
        """In-flight requests the peers report for ``replica``."""
    def peers(self) -> list[str]: ...
    def totals(self) -> dict[str, int]:
        """In-flight requests the peers report, per replica (replicas with none left out)."""

# ---- the pickers

class PrefixPicker:
    """The ``prefixaware`` pick over a :class:`PrefixIndex` and a :class:`ShareMeter` (docs/router.md)."""

    index: PrefixIndex
    shares: ShareMeter
    def __init__(
        self,
        *,
        cap: int | None,
        epsilon: float,
        min_ceiling: int,
        block_chars: int,
        home_blocks: int,
        home_choices: int,
        prefill_aware: bool,
        balance_epsilon: float,
        balance_slack: float,
        index: PrefixIndex,
        shares: ShareMeter,
    ) -> None: ...
    def choose(
        self,
        names: Sequence[str],
        inflight: Sequence[int],
        peers: Sequence[int],
        prefill_chars: Sequence[int],
        blocks: Sequence[int],
        anchor: int | None,
        anchor_chars: int,
        chars: int,
    ) -> tuple[list[str], int, bool] | None:
        """``(candidates, matched blocks of the first, spilled)``; None for a key with neither blocks nor an
        anchor (the caller balances load). ``inflight`` is this router's own (the cap bounds it), ``peers`` the
        peer routers' per replica (the burst ceiling bounds their sum)."""
    def placed(self, replica: str, blocks: Sequence[int], anchor: int | None = None) -> None:
        """This router sent the request to ``replica``: the index records its blocks, the shares count it."""
    def peer_placed(self, replica: str, blocks: Sequence[int], anchor: int | None = None) -> None:
        """A peer router sent a request to ``replica``: the index records its blocks (LRU, like its own)."""
    def forget(self, replica: str) -> None: ...

class EnginePicker:
    """The ``kvEvents`` pick over an :class:`EventIndex` (live replicas) and a text :class:`PrefixIndex`."""

    events: EventIndex
    text: PrefixIndex
    def __init__(
        self,
        *,
        cap: int | None,
        balance_epsilon: float,
        balance_slack: float,
        block_chars: int,
        chars_per_token: int,
        ttl: float,
        events: EventIndex,
        text: PrefixIndex,
    ) -> None: ...
    def choose(
        self,
        names: Sequence[str],
        inflight: Sequence[int],
        peers: Sequence[int],
        live: Sequence[bool],
        token_keys: Sequence[int] | None,
        blocks: Sequence[int],
        loads: Sequence[float | None],
        rates: Sequence[float | None],
        now: float,
    ) -> tuple[list[str], int, bool, bool]:
        """``(candidates, tokens matched by the first, matched by events, spilled)``. ``loads`` are the engines'
        (None: unknown, own + peers' in-flight count stands in); the cap bounds ``inflight``, this router's own."""
    def placed(self, replica: str, blocks: Sequence[int], token_keys: Sequence[int] | None, now: float) -> None:
        """This router sent the request to ``replica``: text blocks recorded, token keys speculative until now + TTL."""
    def peer_placed(self, replica: str, blocks: Sequence[int], token_keys: Sequence[int] | None, expiry: float) -> None:
        """A peer router sent a request to ``replica``: the same entries, speculative until ``expiry``."""
    def forget(self, replica: str) -> None: ...
