"""The peer-sync wire format: a message survives the round trip under its key; anything else is rejected by reason."""

from __future__ import annotations

import msgpack
import pytest

from warmstart.router import peerwire
from warmstart.router.peerwire import Message, Pick, Reason, Rejected

KEY = b"k" * 32
SENDER = b"\x01" * 8


def message(**changes: object) -> Message:
    fields: dict[str, object] = {
        "sender": SENDER,
        "seq": 7,
        "sent_ms": 1_700_000_000_000,
        "inflight": {"http://10.0.0.1:8000": 3},
        "picks": (
            Pick("http://10.0.0.1:8000", (1, 2**64 - 1), None, None),
            Pick("http://10.0.0.2:8000", (5,), 9, (11, 12)),
        ),
    }
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


def signed(fields: list[object]) -> list[bytes]:
    payload = msgpack.packb(fields, use_bin_type=True)
    return [payload, peerwire.mac(KEY, payload)]


def rejected(frames: list[bytes], key: bytes = KEY) -> Reason:
    with pytest.raises(Rejected) as caught:
        peerwire.decode(frames, key)
    return caught.value.reason


def test_a_message_round_trips_under_its_key() -> None:
    sent = message()
    assert peerwire.decode(peerwire.encode(sent, KEY), KEY) == sent


def test_another_key_or_a_changed_byte_is_forged() -> None:
    frames = peerwire.encode(message(), KEY)
    assert rejected(frames, b"x" * 32) is Reason.FORGED
    tampered = bytearray(frames[0])
    tampered[-1] ^= 1
    assert rejected([bytes(tampered), frames[1]]) is Reason.FORGED
    assert rejected([frames[0], b""]) is Reason.FORGED
    assert rejected([frames[0]]) is Reason.MALFORMED


def test_an_oversized_payload_is_dropped_before_its_mac_is_computed() -> None:
    assert rejected([b"\x00" * (peerwire.MAX_PAYLOAD_BYTES + 1), b"\x00" * 32]) is Reason.OVERSIZED


@pytest.mark.parametrize(
    "fields",
    [
        [2, SENDER, 1, 0, {}, []],  # another version
        [1, b"short", 1, 0, {}, []],  # sender id of the wrong length
        [1, SENDER, 0, 0, {}, []],  # sequence numbers start at 1
        [1, SENDER, -1, 0, {}, []],
        [1, SENDER, 1, 0, {"http://a:1": -1}, []],  # a negative count
        [1, SENDER, 1, 0, {"http://a:1": 1.5}, []],
        [1, SENDER, 1, 0, {"": 1}, []],
        [1, SENDER, 1, 0, {}, [["http://a:1", [1], None, None]]],  # keys not packed
        [1, SENDER, 1, 0, {}, [["http://a:1", b"1234567", None, None]]],  # not a whole key
        [1, SENDER, 1, 0, {}, [["http://a:1", b"", "anchor", None]]],
        [1, SENDER, 1, 0, {}, [["http://a:1", b"", None]]],
        [1, SENDER, 1, 0, {}, [["http://a:1", b"", None, [1]]]],
        [1, SENDER, 1, 0, {}, [["http://a:1", b"\0" * 8 * (peerwire.MAX_BLOCKS + 1), None, None]]],
        [1, SENDER, 1, 0, {}, [["http://a:1", b"", None, None]] * (peerwire.MAX_PICKS + 1)],
        [1, SENDER, 1, 0, {}],
        "not a list",
    ],
)
def test_an_authentic_message_of_the_wrong_shape_is_malformed(fields: object) -> None:
    assert rejected(signed(fields if isinstance(fields, list) else [fields])) is Reason.MALFORMED


def test_bytes_that_are_not_msgpack_are_malformed() -> None:
    payload = b"\xc1\xc1\xc1"
    assert rejected([payload, peerwire.mac(KEY, payload)]) is Reason.MALFORMED
