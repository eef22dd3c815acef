"""What a router believes about its peers: their in-flight counts, within bounds, for as long as they keep talking.

Pure (no I/O, no clock of its own): the transport hands every authentic message to
:meth:`PeerBook.admit` with the time, and asks :meth:`PeerBook.inflight` when it routes.

A peer may claim only what a router could hold:

- **Replay.** A message must carry a sequence number above the sender's last one, and a send
  time within ``skew`` of this router's clock; a sender's last sequence number is remembered for
  ``skew`` seconds after it falls silent, so a captured message cannot be played back later.
- **Rate.** Each sender has token buckets for messages and picks; what exceeds them is dropped
  (``flood``). A pick's entries are speculative where the policy supports it: they expire.
- **In-flight.** A count is clipped to ``max_inflight`` per replica (the concurrency cap when
  one is set: a router never holds more there); counts for replicas this router does not know
  are ignored.
- **Silence.** A sender that has sent nothing for ``timeout`` seconds (it heartbeats far more
  often) no longer counts: its in-flight counts drop to zero, bounded in time after it dies.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from warmstart.router.peerwire import Message, Pick, Reason, Rejected


@dataclass(slots=True)
class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    rate: float
    burst: float
    tokens: float = -1.0
    at: float = 0.0

    def take(self, count: float, now: float) -> bool:
        """Take ``count`` tokens if there are that many (True), else take none (False)."""
        if self.tokens < 0:
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if count > self.tokens:
            return False
        self.tokens -= count
        return True


@dataclass(slots=True)
class Peer:
    """One sender's state."""

    seq: int
    seen: float
    inflight: dict[str, int] = field(default_factory=dict)
    messages: Bucket = field(default_factory=lambda: Bucket(0.0, 0.0))
    picks: Bucket = field(default_factory=lambda: Bucket(0.0, 0.0))
    accepted: int = 0


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds on what one peer may claim."""

    timeout: float = 3.0
    """Seconds of silence after which a peer's in-flight counts no longer count."""
    skew: float = 30.0
    """Seconds a message's send time may differ from this router's clock."""
    messages_per_second: float = 2000.0
    picks_per_second: float = 5000.0
    max_inflight: int = 4096
    """In-flight requests one peer may claim on one replica."""


class PeerBook:
    """Every peer's last word, bounded; see the module doc."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._peers: dict[bytes, Peer] = {}
        self._totals: dict[str, int] = {}
        self.clipped = 0
        """In-flight claims cut down to ``max_inflight``."""

    def admit(self, message: Message, now: float, wall_ms: int, known: Collection[str]) -> tuple[Pick, ...]:
        """Take ``message`` in (its in-flight counts) and return its picks for the policy; :class:`Rejected` if it
        is a replay, stale or over its sender's rate."""
        limits = self.limits
        if abs(wall_ms - message.sent_ms) > limits.skew * 1000:
            raise Rejected(Reason.STALE)
        peer = self._peers.get(message.sender)
        if peer is not None and message.seq <= peer.seq:
            raise Rejected(Reason.REPLAYED)
        if peer is None:
            peer = Peer(
                0,
                now,
                messages=Bucket(limits.messages_per_second, limits.messages_per_second),
                picks=Bucket(limits.picks_per_second, limits.picks_per_second),
            )
            self._peers[message.sender] = peer
        peer.seq, peer.seen = message.seq, now  # a flood's sequence numbers are spent too: no later replay
        if not peer.messages.take(1, now):
            raise Rejected(Reason.FLOOD)
        picks = message.picks
        if picks and not peer.picks.take(len(picks), now):
            raise Rejected(Reason.FLOOD)
        cap = limits.max_inflight
        inflight: dict[str, int] = {}
        for url, count in message.inflight.items():
            if url in known and count:
                if count > cap:
                    self.clipped += 1
                    count = cap
                inflight[url] = count
        self._set(peer, inflight)
        peer.accepted += 1
        return tuple(pick for pick in picks if pick.replica in known)

    def _set(self, peer: Peer, inflight: dict[str, int]) -> None:
        totals = self._totals
        for url, count in peer.inflight.items():
            left = totals.get(url, 0) - count
            if left > 0:
                totals[url] = left
            else:
                totals.pop(url, None)
        for url, count in inflight.items():
            totals[url] = totals.get(url, 0) + count
        peer.inflight = inflight

    def expire(self, now: float) -> list[bytes]:
        """Zero the in-flight counts of peers silent for ``timeout``; forget peers silent for ``skew`` (their
        sequence numbers can no longer be replayed: the send time would be stale). Returns the peers zeroed now."""
        zeroed = []
        for sender, peer in list(self._peers.items()):
            silent = now - peer.seen
            if silent >= self.limits.timeout and peer.inflight:
                self._set(peer, {})
                zeroed.append(sender)
            if silent >= self.limits.skew:
                del self._peers[sender]
        return zeroed

    def inflight(self) -> Mapping[str, int]:
        """Requests the live peers have in flight, by replica (replicas at zero left out)."""
        return self._totals

    def live(self, now: float) -> int:
        """Peers heard from within ``timeout``."""
        return sum(1 for peer in self._peers.values() if now - peer.seen < self.limits.timeout)

    def status(self, now: float) -> list[dict[str, object]]:
        """Each known peer: its id, seconds since it last spoke, its in-flight total and messages accepted."""
        return [
            {
                "sender": sender.hex(),
                "silentSeconds": round(now - peer.seen, 3),
                "inflight": sum(peer.inflight.values()),
                "messages": peer.accepted,
            }
            for sender, peer in sorted(self._peers.items())
        ]

    def forget_replica(self, url: str) -> None:
        """``url`` left the fleet: no peer's count of it matters."""
        for peer in self._peers.values():
            if url in peer.inflight:
                self._set(peer, {k: v for k, v in peer.inflight.items() if k != url})
