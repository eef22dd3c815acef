"""The endpoint picker's pure rules: endpoint names, subset hints, served endpoints, pick lists and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from warmstart.api.routers import RouterConfig
from warmstart.router import picking
from warmstart.router.bodies import ParsedBody
from warmstart.router.routing import Router

FLEET = ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.2:9000", "http://[fd00::7]:8000"]


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("http://10.0.0.1:8000", "10.0.0.1:8000"),
        ("http://[fd00::7]:8000", "[fd00::7]:8000"),
        ("10.0.0.1:8000", "10.0.0.1:8000"),
        ("http://10.0.0.1:8000/", "10.0.0.1:8000"),
    ],
)
def test_endpoint_of_a_fleet_url(url: str, endpoint: str) -> None:
    assert picking.endpoint_of(url) == endpoint


def test_picked_value_is_the_endpoints_in_order() -> None:
    assert picking.Picked(("http://10.0.0.2:8000", "http://[fd00::7]:8000")).value == "10.0.0.2:8000,[fd00::7]:8000"


@pytest.mark.parametrize(
    ("metadata", "hint"),
    [
        ({}, None),
        ({"envoy.lb": {picking.SUBSET_KEY: ["10.0.0.1:8000"]}}, None),  # another namespace: no hint
        ({picking.SUBSET_NAMESPACE: {"other": "x"}}, None),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: []}}, []),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: ""}}, []),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: " , "}}, []),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: 7}}, []),  # not an endpoint list: names nothing
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: ["a:1", " b:2 "]}}, ["a:1", "b:2"]),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: "a:1, b:2"}}, ["a:1", "b:2"]),
        ({picking.SUBSET_NAMESPACE: {picking.SUBSET_KEY: ["a:1,b:2", 3, "c"]}}, ["a:1", "b:2", "c"]),
    ],
)
def test_subset_hint(metadata: dict[str, Any], hint: list[str] | None) -> None:
    assert picking.subset_hint(metadata) == hint


@pytest.mark.parametrize(
    ("hint", "matched"),
    [
        (["10.0.0.1:8000"], {"http://10.0.0.1:8000"}),
        (["10.0.0.2"], {"http://10.0.0.2:8000", "http://10.0.0.2:9000"}),  # an address alone: every port
        (["10.0.0.2:9000", "10.0.0.9:8000"], {"http://10.0.0.2:9000"}),
        (["[fd00::7]:8000"], {"http://[fd00::7]:8000"}),
        (["fd00::7"], {"http://[fd00::7]:8000"}),
        (["[fd00::7]:9"], set()),
        (["10.0.0.1:80"], set()),
        (["10.0.0.10:8000"], set()),  # not a prefix match
        ([], set()),
    ],
)
def test_within(hint: list[str], matched: set[str]) -> None:
    assert picking.within(hint, FLEET) == matched


@pytest.mark.parametrize(
    ("metadata", "served"),
    [
        ({}, None),
        ({"envoy.lb": {}}, None),
        ({"envoy.lb": {picking.SERVED_KEY: ""}}, None),
        ({"envoy.lb": {picking.SERVED_KEY: 5}}, None),
        ({"envoy.lb": {picking.SERVED_KEY: "10.0.0.2:8000"}}, "10.0.0.2:8000"),
        ({"envoy.lb": {picking.SERVED_KEY: " 10.0.0.2:8000,10.0.0.1:8000"}}, "10.0.0.2:8000"),
    ],
)
def test_served_endpoint(metadata: dict[str, Any], served: str | None) -> None:
    assert picking.served_endpoint(metadata) == served


def test_url_in() -> None:
    assert picking.url_in("10.0.0.2:9000", FLEET) == "http://10.0.0.2:9000"
    assert picking.url_in("10.0.0.2", FLEET) is None


def test_pick_keeps_the_policy_order_under_the_cap_and_the_retry_budget() -> None:
    inflight = {"a": 3, "b": 0, "c": 1, "d": 0}
    assert picking.pick(["a", "b", "c", "d"], inflight, cap=None, retries=1, hinted=False) == picking.Picked(("a", "b"))
    assert picking.pick(["a", "b", "c", "d"], inflight, cap=3, retries=2, hinted=False) == picking.Picked(
        ("b", "c", "d")
    )
    assert picking.pick(["c"], inflight, cap=2, retries=3, hinted=False) == picking.Picked(("c",))


@pytest.mark.parametrize(
    ("candidates", "hinted", "status", "reason"),
    [
        ([], False, 503, picking.Reason.NO_ENDPOINT),
        ([], True, 503, picking.Reason.SUBSET_UNMATCHED),
        (["a"], False, 429, picking.Reason.OVERLOADED),
        (["a"], True, 429, picking.Reason.OVERLOADED),
    ],
)
def test_pick_refusals(candidates: list[str], hinted: bool, status: int, reason: picking.Reason) -> None:
    refused = picking.pick(candidates, {"a": 2}, cap=2, retries=1, hinted=hinted)
    assert isinstance(refused, picking.Refused)
    assert (refused.status, refused.reason) == (status, reason)


def test_router_decide_restricted_to_a_subset() -> None:
    router = Router(RouterConfig(strategy="roundrobin"), FLEET)
    only = {"http://10.0.0.2:8000", "http://10.0.0.2:9000"}
    body = ParsedBody("prompt", 6, None)
    seen = {router.decide(body, None, only=only).decision.candidates[0] for _ in range(6)}
    assert seen == only
    assert all(set(router.decide(body, None, only=only).decision.candidates) == only for _ in range(4))
    assert router.decide(body, None, only=frozenset()).decision.candidates == ()
    assert len(router.decide(body, None).decision.candidates) == len(FLEET)


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (picking.Reason.BAD_REQUEST, "bad_request"),
        (picking.Reason.BODY_TOO_LARGE, "bad_request"),
        (picking.Reason.BUSY, "bad_request"),
        (picking.Reason.UNSUPPORTED_MODE, "bad_request"),
        (picking.Reason.NO_ENDPOINT, "no_replica"),
        (picking.Reason.SUBSET_EMPTY, "no_replica"),
        (picking.Reason.SUBSET_UNMATCHED, "no_replica"),
        (picking.Reason.OVERLOADED, "overflow"),
    ],
)
def test_refusals_are_counted_under_the_proxys_outcomes(reason: picking.Reason, outcome: str) -> None:
    assert reason.outcome == outcome
