"""What the routing core offers routers that share picks: peers' picks in the indexes, their requests in the load."""

from __future__ import annotations

from warmstart import _routing_core as core

NAMES = ["http://a", "http://b", "http://c", "http://d"]
TOKENS = list(range(64))


def _block_stored(hashes: list[int], tokens: list[int]) -> core.BlockStored:
    return core.BlockStored(hashes, None, tokens, 16)


def test_a_peers_pick_counts_as_held_until_its_ttl() -> None:
    index = core.EventIndex(16)
    keys = core.chain_keys(TOKENS, 16)
    picker = core.EnginePicker(
        cap=None,
        balance_epsilon=0.5,
        balance_slack=2.0,
        block_chars=64,
        chars_per_token=4,
        ttl=5.0,
        events=index,
        text=core.PrefixIndex(100),
    )
    picker.peer_placed(NAMES[2], [], keys, expiry=10.0)
    assert index.match(keys, NAMES, 9.0) == {NAMES[2]: 4}
    assert index.match(keys, NAMES, 10.0) == {}


def test_a_confirming_event_replaces_the_speculative_entry() -> None:
    index = core.EventIndex(16)
    keys = core.chain_keys(TOKENS, 16)
    index.speculate(NAMES[0], keys, 100.0)
    index.apply(NAMES[0], _block_stored([1, 2, 3, 4], TOKENS))
    index.apply(NAMES[0], core.BlockRemoved([3]))
    assert index.match(keys, NAMES, 1.0) == {NAMES[0]: 2}, "the events decide once they confirm"


def test_peer_loads_add_up_by_peer_and_a_report_replaces_the_last() -> None:
    peers = core.PeerLoads()
    peers.set("router-1", {NAMES[0]: 3, NAMES[1]: 1})
    peers.set("router-2", {NAMES[0]: 2})
    assert peers.totals() == {NAMES[0]: 5, NAMES[1]: 1}
    peers.set("router-1", {NAMES[1]: 4})
    assert peers.totals() == {NAMES[0]: 2, NAMES[1]: 4}
    peers.forget("router-2")
    assert peers.inflight(NAMES[0]) == 0
    assert peers.peers() == ["router-1"]


def test_peers_requests_move_a_pick_past_the_burst_ceiling() -> None:
    index, shares = core.PrefixIndex(100), core.ShareMeter(100)
    picker = core.PrefixPicker(
        cap=None,
        epsilon=0.25,
        min_ceiling=2,
        block_chars=4,
        home_blocks=1,
        home_choices=1,
        prefill_aware=False,
        balance_epsilon=0.5,
        balance_slack=2.0,
        index=index,
        shares=shares,
    )
    picker.peer_placed(NAMES[2], [11, 12])
    assert index.holders(11) == {NAMES[2]}
    idle = picker.choose(NAMES, [0, 0, 0, 0], [0, 0, 0, 0], [0] * 4, [11, 12], None, 0, 8)
    assert idle is not None and idle[0][0] == NAMES[2] and idle[1] == 2
    busy = picker.choose(NAMES, [0, 0, 0, 0], [0, 0, 8, 0], [0] * 4, [11, 12], None, 0, 8)
    assert busy is not None and busy[0][0] != NAMES[2] and busy[2], "the peers' 8 requests put c over the ceiling"
