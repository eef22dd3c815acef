"""What a router believes of its peers: replays, stale and flooding messages are refused, claims are bounded, and a
silent peer's in-flight counts stop counting."""

from __future__ import annotations

import pytest

from warmstart.router.peerstate import Bucket, Limits, PeerBook
from warmstart.router.peerwire import Message, Pick, Reason, Rejected

A, B = b"a" * 8, b"b" * 8
R1, R2 = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
KNOWN = frozenset({R1, R2})
WALL = 1_700_000_000_000


def msg(sender: bytes, seq: int, inflight: dict[str, int], picks: tuple[Pick, ...] = (), sent: int = WALL) -> Message:
    return Message(sender, seq, sent, inflight, picks)


def reason(book: PeerBook, message: Message, now: float = 0.0) -> Reason:
    with pytest.raises(Rejected) as caught:
        book.admit(message, now, WALL, KNOWN)
    return caught.value.reason


def test_peers_in_flight_counts_add_up_and_are_replaced_by_each_message() -> None:
    book = PeerBook()
    book.admit(msg(A, 1, {R1: 2}), 0.0, WALL, KNOWN)
    book.admit(msg(B, 1, {R1: 1, R2: 4}), 0.0, WALL, KNOWN)
    assert dict(book.inflight()) == {R1: 3, R2: 4}
    book.admit(msg(A, 2, {}), 0.1, WALL, KNOWN)
    assert dict(book.inflight()) == {R1: 1, R2: 4}


def test_a_replayed_or_old_message_is_refused() -> None:
    book = PeerBook()
    book.admit(msg(A, 5, {R1: 1}), 0.0, WALL, KNOWN)
    assert reason(book, msg(A, 5, {R1: 9})) is Reason.REPLAYED
    assert reason(book, msg(A, 4, {R1: 9})) is Reason.REPLAYED
    assert dict(book.inflight()) == {R1: 1}


def test_a_message_sent_too_long_ago_or_ahead_is_stale() -> None:
    book = PeerBook(Limits(skew=30.0))
    assert reason(book, msg(A, 1, {R1: 1}, sent=WALL - 31_000)) is Reason.STALE
    assert reason(book, msg(A, 1, {R1: 1}, sent=WALL + 31_000)) is Reason.STALE
    assert not book.inflight()


def test_a_sender_is_remembered_past_its_silence_until_its_messages_would_be_stale() -> None:
    book = PeerBook(Limits(timeout=3.0, skew=30.0))
    book.admit(msg(A, 9, {R1: 1}), 0.0, WALL, KNOWN)
    book.expire(10.0)
    assert reason(book, msg(A, 9, {R1: 1}), now=10.0) is Reason.REPLAYED


def test_claims_beyond_a_routers_reach_are_clipped_and_unknown_replicas_ignored() -> None:
    book = PeerBook(Limits(max_inflight=8))
    picks = book.admit(
        msg(A, 1, {R1: 10_000, "http://elsewhere:1": 5}, (Pick(R1, (1,)), Pick("http://elsewhere:1", (2,)))),
        0.0,
        WALL,
        KNOWN,
    )
    assert dict(book.inflight()) == {R1: 8}
    assert book.clipped == 1
    assert picks == (Pick(R1, (1,)),)


def test_a_flooding_sender_is_refused_over_its_rate_and_others_are_not() -> None:
    book = PeerBook(Limits(messages_per_second=10.0, picks_per_second=100.0))
    accepted = 0
    for seq in range(1, 51):
        try:
            book.admit(msg(A, seq, {R1: 1}), 0.0, WALL, KNOWN)
            accepted += 1
        except Rejected as rejected:
            assert rejected.reason is Reason.FLOOD
    assert accepted == 10
    book.admit(msg(B, 1, {R2: 1}), 0.0, WALL, KNOWN)
    many = tuple(Pick(R1, (k,)) for k in range(101))
    assert reason(book, msg(B, 2, {}, many)) is Reason.FLOOD


def test_a_silent_peer_stops_counting_after_the_timeout() -> None:
    book = PeerBook(Limits(timeout=3.0))
    book.admit(msg(A, 1, {R1: 4}), 0.0, WALL, KNOWN)
    book.admit(msg(B, 1, {R1: 1}), 0.0, WALL, KNOWN)
    assert book.expire(2.9) == []
    book.admit(msg(B, 2, {R1: 1}), 2.9, WALL, KNOWN)
    assert book.expire(3.0) == [A]
    assert dict(book.inflight()) == {R1: 1}
    assert book.live(3.0) == 1


def test_a_token_bucket_refills_at_its_rate() -> None:
    bucket = Bucket(rate=2.0, burst=2.0)
    assert bucket.take(2, 0.0)
    assert not bucket.take(1, 0.1)
    assert bucket.take(1, 0.6)
