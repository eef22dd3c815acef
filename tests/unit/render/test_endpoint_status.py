"""Endpoint conditions and state (render/endpoint_status.py): one test per branch, each named after its policy."""

from __future__ import annotations

import pytest

from warmstart.api.base import Condition, ConditionStatus
from warmstart.api.states import CacheState, ConditionType, EndpointState
from warmstart.api.statuses import CacheSummary
from warmstart.render import endpoint_status
from warmstart.render.conditions import condition
from warmstart.render.endpoint_status import DeploymentFacts
from warmstart.render.gating import Gate

GEN = 7
OPEN = Gate(True, "WeightsCacheReady", "weights cached on all target nodes (2/2 target nodes ready)")
WAITING = Gate(False, "WaitingForWeightsCache", "preloading weights: 1/2 target nodes ready")
TIMED_OUT = Gate(True, "MaxDeployTimeExceeded", "waited 600s for the weights cache; deploying anyway", degraded=True)
READY_CACHE = CacheSummary(state=CacheState.READY, ready_nodes=2, target_nodes=2)
ROLLED_OUT = DeploymentFacts(
    exists=True, desired=2, replicas=2, updated=2, available=2, current_generation=True, rolled_out=True
)
ROLLING = DeploymentFacts(
    exists=True, desired=2, replicas=3, updated=1, available=2, current_generation=True, rolled_out=False, name="llama"
)


def conditions(
    gate: Gate = OPEN,
    deployment: DeploymentFacts = ROLLED_OUT,
    weights: CacheSummary | None = READY_CACHE,
    weights_enabled: bool = True,
    image: CacheSummary | None = READY_CACHE,
    image_enabled: bool = True,
) -> dict[str, Condition]:
    found = endpoint_status.conditions(GEN, gate, weights, weights_enabled, image, image_enabled, deployment)
    assert all(c.observed_generation == GEN for c in found)
    return {c.type: c for c in found}


def summary_of(c: Condition) -> tuple[ConditionStatus, str]:
    return c.status, c.reason


# Cache conditions (WeightsCacheReady and ImageCacheReady share one rule)


def test_cache_condition_is_true_when_caching_is_off() -> None:
    found = conditions(weights=None, weights_enabled=False, image=None, image_enabled=False)
    assert summary_of(found[ConditionType.WEIGHTS_CACHE_READY]) == (ConditionStatus.TRUE, "CacheDisabled")
    assert summary_of(found[ConditionType.IMAGE_CACHE_READY]) == (ConditionStatus.TRUE, "CacheDisabled")


@pytest.mark.parametrize("weights", [None, CacheSummary(state=None)], ids=["no-summary", "no-state"])
def test_cache_condition_is_pending_until_the_cache_reports(weights: CacheSummary | None) -> None:
    found = conditions(weights=weights)[ConditionType.WEIGHTS_CACHE_READY]
    assert (found.status, found.reason, found.message) == (
        ConditionStatus.FALSE,
        "Pending",
        "the cache has not reported yet",
    )


def test_cache_condition_is_true_when_the_cache_is_ready_and_shows_node_counts() -> None:
    found = conditions()[ConditionType.IMAGE_CACHE_READY]
    assert (found.status, found.reason, found.message) == (ConditionStatus.TRUE, "Ready", "2/2 nodes ready")


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (CacheState.FAILED, "Failed"),
        (CacheState.PARTIALLY_READY, "PartiallyReady"),
        (CacheState.DOWNLOADING, "Downloading"),
        (CacheState.PENDING, "Pending"),
        (CacheState.DELETING, "Pending"),
    ],
)
def test_cache_condition_is_false_with_the_cache_state_as_reason_until_ready(state: CacheState, reason: str) -> None:
    weights = CacheSummary(state=state, ready_nodes=1, target_nodes=2, message="node n2: NotFound")
    found = conditions(weights=weights)[ConditionType.WEIGHTS_CACHE_READY]
    assert (found.status, found.reason, found.message) == (
        ConditionStatus.FALSE,
        reason,
        "1/2 nodes ready: node n2: NotFound",
    )


def test_a_cache_condition_that_is_not_ready_names_the_cache_to_describe() -> None:
    weights = CacheSummary(name="weights-k", state=CacheState.DOWNLOADING, ready_nodes=0, target_nodes=2)
    image = CacheSummary(name="image-k", state=CacheState.PENDING, ready_nodes=1, target_nodes=2)
    found = conditions(weights=weights, image=image)
    assert (
        found[ConditionType.WEIGHTS_CACHE_READY].message == "0/2 nodes ready; per node: kubectl describe mdcc weights-k"
    )
    assert found[ConditionType.IMAGE_CACHE_READY].message == "1/2 nodes ready; per node: kubectl describe mic image-k"


# Degraded


def test_degraded_carries_the_gate_reason_when_the_gate_opened_without_a_full_cache() -> None:
    found = conditions(gate=TIMED_OUT)[ConditionType.DEGRADED]
    assert (found.status, found.reason, found.message) == (
        ConditionStatus.TRUE,
        "MaxDeployTimeExceeded",
        TIMED_OUT.message,
    )


def test_not_degraded_is_as_expected_with_no_message() -> None:
    found = conditions()[ConditionType.DEGRADED]
    assert (found.status, found.reason, found.message) == (ConditionStatus.FALSE, "AsExpected", "")


# Progressing and Ready


def test_a_failed_rollout_stops_progress_and_is_not_ready() -> None:
    failed = DeploymentFacts(
        exists=True, desired=2, failed_message="ReplicaSet has timed out progressing", name="llama-deployment"
    )
    found = conditions(deployment=failed)
    assert summary_of(found[ConditionType.PROGRESSING]) == (ConditionStatus.FALSE, "ProgressDeadlineExceeded")
    assert summary_of(found[ConditionType.READY]) == (ConditionStatus.FALSE, "DeploymentFailed")
    assert found[ConditionType.READY].message == (
        "ReplicaSet has timed out progressing; kubectl describe deployment llama-deployment and its pods say why, "
        "a change to the spec rolls out again"
    )


def test_without_a_deployment_progress_and_readiness_tell_the_gate_reason() -> None:
    found = conditions(gate=WAITING, deployment=DeploymentFacts())
    for type_, status in (
        (ConditionType.PROGRESSING, ConditionStatus.TRUE),
        (ConditionType.READY, ConditionStatus.FALSE),
    ):
        assert (found[type_].status, found[type_].reason, found[type_].message) == (
            status,
            WAITING.reason,
            WAITING.message,
        )


def test_a_closed_gate_over_a_running_deployment_says_the_previous_generation_still_serves() -> None:
    found = conditions(gate=WAITING)
    progressing = found[ConditionType.PROGRESSING]
    assert (progressing.status, progressing.reason) == (ConditionStatus.TRUE, WAITING.reason)
    assert (
        progressing.message == f"{WAITING.message}; serving the previous generation (2/2 replicas available, 2 updated)"
    )


def test_endpoint_is_not_ready_while_the_gate_holds_back_a_new_generation() -> None:
    assert summary_of(conditions(gate=WAITING)[ConditionType.READY]) == (ConditionStatus.FALSE, "NotReady")


def test_an_open_gate_with_a_rollout_under_way_is_progressing_and_not_ready() -> None:
    found = conditions(deployment=ROLLING)
    assert summary_of(found[ConditionType.PROGRESSING]) == (ConditionStatus.TRUE, "RollingOut")
    assert found[ConditionType.PROGRESSING].message == (
        "2/2 replicas available, 1 updated; waiting for the new model pods to become available: "
        "kubectl rollout status deployment/llama"
    )
    assert summary_of(found[ConditionType.READY]) == (ConditionStatus.FALSE, "NotReady")


def test_endpoint_serves_when_rolled_out_through_an_open_gate_with_every_replica_available() -> None:
    found = conditions()
    assert summary_of(found[ConditionType.PROGRESSING]) == (ConditionStatus.FALSE, "RolloutComplete")
    assert summary_of(found[ConditionType.READY]) == (ConditionStatus.TRUE, "Serving")


def test_a_rolled_out_deployment_missing_available_replicas_is_not_ready() -> None:
    short = DeploymentFacts(
        exists=True, desired=3, replicas=3, updated=3, available=2, current_generation=True, rolled_out=True
    )
    found = conditions(deployment=short)
    assert summary_of(found[ConditionType.READY]) == (ConditionStatus.FALSE, "NotReady")
    assert found[ConditionType.READY].message == "2/3 replicas available, 3 updated"


def test_conditions_come_in_a_stable_order() -> None:
    found = endpoint_status.conditions(GEN, OPEN, READY_CACHE, True, READY_CACHE, True, ROLLED_OUT)
    assert [c.type for c in found] == ["WeightsCacheReady", "ImageCacheReady", "Degraded", "Progressing", "Ready"]


def test_a_spec_that_cannot_resolve_fails_resolved_ready_and_progressing_with_one_reason() -> None:
    found = endpoint_status.failed(GEN, "EulaNotAccepted", "accept the EULA")
    assert [(c.type, c.status, c.reason) for c in found] == [
        ("Resolved", ConditionStatus.FALSE, "EulaNotAccepted"),
        ("Ready", ConditionStatus.FALSE, "EulaNotAccepted"),
        ("Progressing", ConditionStatus.FALSE, "EulaNotAccepted"),
    ]


# state: the HyperPod summary derived from the conditions


def state_of(*conds: Condition, deployment: DeploymentFacts = ROLLED_OUT) -> EndpointState:
    return endpoint_status.state(list(conds), deployment)


def test_state_is_failed_when_the_spec_did_not_resolve_even_if_ready_is_true() -> None:
    resolved = condition(ConditionType.RESOLVED, False, "EulaNotAccepted")
    ready = condition(ConditionType.READY, True, "Serving")
    assert state_of(resolved, ready) == EndpointState.DEPLOYMENT_FAILED


def test_state_is_failed_when_the_rollout_failed() -> None:
    failed = DeploymentFacts(exists=True, failed_message="timed out")
    assert (
        state_of(condition(ConditionType.READY, True, "Serving"), deployment=failed) == EndpointState.DEPLOYMENT_FAILED
    )


def test_state_is_complete_when_ready_and_a_resolved_spec_does_not_change_that() -> None:
    resolved = condition(ConditionType.RESOLVED, True, "Resolved")
    assert state_of(resolved, condition(ConditionType.READY, True, "Serving")) == EndpointState.DEPLOYMENT_COMPLETE


def test_state_is_pending_until_the_deployment_exists() -> None:
    progressing = condition(ConditionType.PROGRESSING, True, "WaitingForWeightsCache")
    assert state_of(progressing, deployment=DeploymentFacts()) == EndpointState.DEPLOYMENT_PENDING


def test_state_is_in_progress_while_progressing() -> None:
    progressing = condition(ConditionType.PROGRESSING, True, "RollingOut")
    not_ready = condition(ConditionType.READY, False, "NotReady")
    assert state_of(progressing, not_ready, deployment=ROLLING) == EndpointState.DEPLOYMENT_IN_PROGRESS


def test_state_is_in_progress_when_rolled_out_but_not_ready() -> None:
    done = condition(ConditionType.PROGRESSING, False, "RolloutComplete")
    assert state_of(done, condition(ConditionType.READY, False, "NotReady")) == EndpointState.DEPLOYMENT_IN_PROGRESS


def test_state_is_in_progress_without_any_condition_once_the_deployment_exists() -> None:
    assert state_of() == EndpointState.DEPLOYMENT_IN_PROGRESS


@pytest.mark.parametrize(
    ("gate", "deployment", "expected"),
    [
        (WAITING, DeploymentFacts(), EndpointState.DEPLOYMENT_PENDING),
        (WAITING, ROLLED_OUT, EndpointState.DEPLOYMENT_IN_PROGRESS),
        (OPEN, ROLLING, EndpointState.DEPLOYMENT_IN_PROGRESS),
        (OPEN, ROLLED_OUT, EndpointState.DEPLOYMENT_COMPLETE),
        (TIMED_OUT, ROLLED_OUT, EndpointState.DEPLOYMENT_COMPLETE),
        (OPEN, DeploymentFacts(exists=True, failed_message="timed out"), EndpointState.DEPLOYMENT_FAILED),
    ],
)
def test_state_follows_the_conditions_computed_for_the_same_observation(
    gate: Gate, deployment: DeploymentFacts, expected: EndpointState
) -> None:
    conds = endpoint_status.conditions(GEN, gate, READY_CACHE, True, READY_CACHE, True, deployment)
    assert endpoint_status.state(conds, deployment) == expected


# Routing: where clients go while routing is switched on or off


def _routing(facts: endpoint_status.RouterFacts, had: bool = False) -> list[Condition]:
    return endpoint_status.routing_condition(facts, had, GEN)


def test_routing_on_with_an_available_router_says_clients_reach_it() -> None:
    (found,) = _routing(endpoint_status.RouterFacts(True, True, False, "llama-router", 2, 2))
    assert (found.type, found.status, found.reason) == ("Routing", ConditionStatus.TRUE, "ThroughRouter")
    assert found.message == "the Service sends clients to the router llama-router (2/2 router pods available)"


def test_routing_switched_on_says_clients_go_to_the_model_pods_until_a_router_pod_is_available() -> None:
    (found,) = _routing(endpoint_status.RouterFacts(True, False, False, "llama-router", 0, 2))
    assert (found.status, found.reason) == (ConditionStatus.FALSE, "RouterStarting")
    assert "straight to the model pods until a router pod is available (0/2 router pods available)" in found.message
    assert "kubectl describe deployment llama-router" in found.message


def test_routing_switched_off_says_the_router_goes_once_the_service_moved() -> None:
    (found,) = _routing(endpoint_status.RouterFacts(False, False, True, "llama-router"), had=True)
    assert (found.status, found.reason) == (ConditionStatus.FALSE, "RouterRetiring")
    assert "llama-router is removed" in found.message


def test_routing_off_is_said_once_it_was_on_and_never_otherwise() -> None:
    off = endpoint_status.RouterFacts(False, False, False, "llama-router")
    assert _routing(off) == []
    (found,) = _routing(off, had=True)
    assert (found.status, found.reason) == (ConditionStatus.FALSE, "RoutingOff")


def test_a_cache_message_that_repeats_the_node_count_does_not_say_it_twice() -> None:
    weights = CacheSummary(
        name="weights-k",
        state=CacheState.DOWNLOADING,
        ready_nodes=0,
        target_nodes=2,
        message="0/2 nodes ready; warming n1, n2",
    )
    found = conditions(weights=weights)[ConditionType.WEIGHTS_CACHE_READY]
    assert found.message == "0/2 nodes ready: warming n1, n2; per node: kubectl describe mdcc weights-k"
