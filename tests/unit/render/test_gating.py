"""The deployment gate (render/gating.py): one test per branch of `decide`, each named after the policy it keeps."""

from __future__ import annotations

import pytest

from warmstart.api.states import CacheState
from warmstart.api.statuses import CacheSummary
from warmstart.render.cache_volumes import CacheAccess
from warmstart.render.gating import Gate, decide

LIMIT = 600
DEADLINE = "2026-12-01T10:10:00Z"
NO_NODES = (
    "no node matches the endpoint's instance types yet; add nodes of those instance types or change instanceType; "
    f"it deploys anyway after maxDeployTimeInSeconds={LIMIT}, at {DEADLINE}"
)


def summary(state: CacheState | None, ready: int, target: int, message: str | None = None) -> CacheSummary:
    return CacheSummary(name="weights-k", state=state, ready_nodes=ready, target_nodes=target, message=message)


def test_gate_opens_at_once_when_weights_caching_is_off() -> None:
    gate = decide(False, None, 0, LIMIT)
    assert (gate.open, gate.reason, gate.degraded) == (True, "CacheDisabled", False)


@pytest.mark.parametrize("weights", [None, summary(None, 0, 0)], ids=["no-summary", "no-state"])
def test_gate_waits_while_the_cache_has_not_reported(weights: CacheSummary | None) -> None:
    gate = decide(True, weights, 10, LIMIT, DEADLINE)
    assert gate == Gate(
        False,
        "WaitingForWeightsCache",
        "the weights cache has not reported yet; it deploys once the weights are on every target node, "
        f"or after maxDeployTimeInSeconds={LIMIT}, at {DEADLINE}",
    )


def test_gate_opens_when_every_target_node_is_ready() -> None:
    gate = decide(True, summary(CacheState.READY, 3, 3), 10, LIMIT)
    assert (gate.open, gate.reason, gate.degraded) == (True, "WeightsCacheReady", False)
    assert "3/3 target nodes ready" in gate.message


def test_gate_keeps_waiting_when_ready_is_reported_with_fewer_ready_than_target_nodes() -> None:
    gate = decide(True, summary(CacheState.READY, 2, 3), 10, LIMIT)
    assert (gate.open, gate.reason) == (False, "WaitingForWeightsCache")
    assert gate.message.startswith("preloading weights: 2/3 target nodes ready; ")


def test_gate_does_not_open_on_a_ready_cache_with_no_target_nodes() -> None:
    gate = decide(True, summary(CacheState.READY, 0, 0), 10, LIMIT, DEADLINE)
    assert gate == Gate(False, "WaitingForWeightsCache", NO_NODES)


def test_gate_opens_degraded_at_once_when_the_cache_failed_and_says_why() -> None:
    gate = decide(True, summary(CacheState.FAILED, 1, 3, "NotFound on 2 nodes"), 0, LIMIT)
    assert (gate.open, gate.reason, gate.degraded) == (True, "WeightsCacheFailed", True)
    assert "NotFound on 2 nodes" in gate.message and "pods download at start" in gate.message
    assert "fix the model source in the spec to retry; per node: kubectl describe mdcc weights-k" in gate.message


def test_gate_reports_progress_for_a_failed_cache_without_a_message() -> None:
    gate = decide(True, summary(CacheState.FAILED, 1, 3), 0, LIMIT)
    assert gate.open and "1/3 target nodes ready" in gate.message


def test_gate_opens_for_a_failed_cache_even_with_no_target_nodes() -> None:
    gate = decide(True, summary(CacheState.FAILED, 0, 0), 0, LIMIT)
    assert (gate.open, gate.reason, gate.degraded) == (True, "WeightsCacheFailed", True)


def test_gate_waits_for_a_matching_node_while_no_node_is_targeted_and_says_what_to_do() -> None:
    gate = decide(True, summary(CacheState.PENDING, 0, 0), 10, LIMIT, DEADLINE)
    assert gate == Gate(False, "WaitingForWeightsCache", NO_NODES)


@pytest.mark.parametrize("state", [CacheState.PENDING, CacheState.DOWNLOADING, CacheState.PARTIALLY_READY])
def test_gate_waits_while_preloading_and_shows_progress_and_the_cache_message(state: CacheState) -> None:
    gate = decide(True, summary(state, 1, 4, "2 nodes downloading"), 10, LIMIT, DEADLINE)
    assert gate == Gate(
        False,
        "WaitingForWeightsCache",
        "preloading weights: 1/4 target nodes ready; 2 nodes downloading; it deploys once every target node is "
        f"ready, or after maxDeployTimeInSeconds={LIMIT}, at {DEADLINE}; per node: kubectl describe mdcc weights-k",
    )


def test_gate_progress_message_has_no_dangling_separator_without_a_cache_message() -> None:
    assert decide(True, summary(CacheState.DOWNLOADING, 1, 4), 10, LIMIT).message.startswith(
        "preloading weights: 1/4 target nodes ready; it deploys"
    )


def test_a_waiting_message_stays_the_same_while_the_wait_goes_on() -> None:
    """The message names when the wait ends, not how long is left: waiting writes no new status on every pass."""
    messages = {decide(True, summary(CacheState.DOWNLOADING, 1, 4), w, LIMIT, DEADLINE).message for w in (1, 300, 599)}
    assert len(messages) == 1


@pytest.mark.parametrize(
    "weights",
    [None, summary(CacheState.PENDING, 0, 0), summary(CacheState.DOWNLOADING, 1, 4)],
    ids=["not-reported", "no-target-nodes", "preloading"],
)
def test_gate_opens_degraded_once_max_deploy_time_is_reached_whatever_it_waited_for(
    weights: CacheSummary | None,
) -> None:
    waiting = decide(True, weights, 0, LIMIT)
    gate = decide(True, weights, LIMIT, LIMIT)
    assert (gate.open, gate.reason, gate.degraded) == (True, "MaxDeployTimeExceeded", True)
    what = waiting.message.split(";", 1)[0]  # what it waited for, without what to do while waiting
    assert f"waited {LIMIT}s (maxDeployTimeInSeconds={LIMIT})" in gate.message and f"({what}" in gate.message


def test_gate_stays_closed_just_before_max_deploy_time() -> None:
    gate = decide(True, summary(CacheState.DOWNLOADING, 1, 4), LIMIT - 0.5, LIMIT)
    assert (gate.open, gate.degraded) == (False, False)


@pytest.mark.parametrize(
    ("access", "cold"),
    [
        (CacheAccess.HOST_PATH, "pods on cold nodes download at start"),
        (CacheAccess.CSI, "pods on cold nodes wait until the operator's preload Job has filled their node"),
    ],
    ids=["hostPath", "csi"],
)
def test_a_degraded_gate_says_what_pods_on_cold_nodes_do_with_this_cache_access(access: CacheAccess, cold: str) -> None:
    """With cache access csi a cold node's pod does not download: its volume waits for the node's preload Job."""
    late = decide(True, summary(CacheState.DOWNLOADING, 1, 4), LIMIT, LIMIT, access=access)
    failed = decide(True, summary(CacheState.FAILED, 1, 3), 0, LIMIT, access=access)
    assert late.degraded and cold in late.message
    assert failed.degraded and ("pods download at start" in failed.message) == (access == CacheAccess.HOST_PATH)
    if access == CacheAccess.CSI:
        assert "download" not in late.message + failed.message
        assert "wait for their node's preload, which fails the same way until the model source is fixed" in (
            failed.message
        )
