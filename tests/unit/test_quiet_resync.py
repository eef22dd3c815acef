"""A settled weights cache skips the resync while what it reads is unchanged (controllers/preloading.due): the nodes
of its instance types (the node informer's change counts) and the model pods' demand; it still resyncs every
QUIET_RESYNC_FACTOR intervals, and a cache that is not settled resyncs every interval. Job events and retries wake
it as before (tests/integration)."""

from __future__ import annotations

import time

import kopf

from warmstart.controllers import preloading

BODY = {"metadata": {"name": "weights-abc", "namespace": "ns", "uid": "u1"}}
RESYNC = 10.0


def _memo(*, quiet: bool, age: float) -> kopf.Memo:
    memo = kopf.Memo()
    remembered = preloading.memory(memo)
    remembered.quiet, remembered.last_run = quiet, time.monotonic() - age
    remembered.instance_types, remembered.node_changes = frozenset({"ml.a"}), (3,)
    remembered.demand_key, remembered.demanded = ("ns", "abc"), frozenset()
    return memo


def _due(memo: kopf.Memo, changes: int, demand: tuple[str, ...] = ()) -> bool:
    demand_index = {("ns", "abc"): demand} if demand else {}
    return preloading.due(BODY, memo, {}, RESYNC, {"ml.a": (changes,)}, demand_index)


def test_a_settled_cache_skips_the_resync_until_its_nodes_or_demand_change() -> None:
    memo = _memo(quiet=True, age=15)
    assert not _due(memo, 3)
    assert _due(memo, 4)  # a node of its type changed
    assert preloading.memory(memo).seen_changes == (4,)  # what the pass that starts now reads at least
    assert _due(_memo(quiet=True, age=15), 3, demand=("node-1",))  # a model pod waits for it on a node


def test_a_cache_resyncs_every_interval_unless_settled_and_every_few_intervals_when_settled() -> None:
    assert _due(_memo(quiet=False, age=15), 3)
    assert not _due(_memo(quiet=True, age=5), 4)  # node changes are looked at once the interval has passed, as before
    assert _due(_memo(quiet=True, age=RESYNC * preloading.QUIET_RESYNC_FACTOR + 1), 3)
