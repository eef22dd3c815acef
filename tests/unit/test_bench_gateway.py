"""bench/routing_gateway.py's verdicts: the gateway against the proxy, with the tolerances it states, and no goal met
by a missing figure. The bench itself runs Envoy, the picker, the proxy and SGLang and is not a test."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

import reporting
import routing_gateway as bench


def _row(router: str, hit: float, share: float) -> reporting.Row:
    return reporting.Row(router, "shared_prefix", 100, 0, hit, 1.0, 1.0, 1.0, 1.0, share, {})


def _met(verdicts: list[dict[str, str]]) -> dict[str, str]:
    return {v["goal"]: v["met"] for v in verdicts}


def test_equal_within_tolerance_is_met_and_worse_beyond_it_is_not() -> None:
    rows = {
        "a": [_row(bench.GATEWAY, 0.79, 1.20), _row(bench.PROXY, 0.80, 1.15)],
        "b": [_row(bench.GATEWAY, 0.70, 1.40), _row(bench.PROXY, 0.80, 1.15)],
    }
    met = _met(bench.goals(rows, {}))
    assert met[f"a: hit ratio equal to the proxy's (within {bench.HIT_TOLERANCE})"] == "yes"
    assert met[f"a: balance (max/mean share) equal to the proxy's (within {bench.BALANCE_TOLERANCE})"] == "yes"
    assert met[f"b: hit ratio equal to the proxy's (within {bench.HIT_TOLERANCE})"] == "no"
    assert met[f"b: balance (max/mean share) equal to the proxy's (within {bench.BALANCE_TOLERANCE})"] == "no"


def test_better_than_the_proxy_counts_as_met() -> None:
    met = _met(bench.goals({"a": [_row(bench.GATEWAY, 0.9, 1.0), _row(bench.PROXY, 0.8, 1.3)]}, {}))
    assert list(met.values()) == ["yes", "yes", "no", "no"]  # no latency figures: those two are not met


def test_added_latency_is_met_only_at_or_under_the_proxys() -> None:
    added = {
        bench.GATEWAY: {"added_p50@200": 1.0, "added_p50@500": 3.0},
        bench.PROXY: {"added_p50@200": 1.5, "added_p50@500": 2.0},
    }
    met = _met(bench.goals({}, added))
    assert met["added p50 latency at 200/s at most the proxy's"] == "yes"
    assert met["added p50 latency at 500/s at most the proxy's"] == "no"


def test_a_missing_figure_meets_no_goal() -> None:
    met = _met(bench.goals({}, {bench.PROXY: {"added_p50@200": 1.5}}))
    assert met["added p50 latency at 200/s at most the proxy's"] == "no"
