"""Children are re-applied only when their rendering or the Deployment changed, or after the full-resync period."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from warmstart.controllers import applying

CHILDREN = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "m"}, "spec": {"ports": [{"port": 8000}]}}]


def _deployment(generation: int) -> dict[str, Any]:
    return {"metadata": {"name": "m", "generation": generation}}


def test_first_time_then_only_on_change() -> None:
    memo = kopf.Memo()
    assert applying.needed(memo, "uid", CHILDREN, _deployment(1))
    applying.record(memo, "uid", CHILDREN, _deployment(1))
    assert not applying.needed(memo, "uid", CHILDREN, _deployment(1))
    changed = [{**CHILDREN[0], "spec": {"ports": [{"port": 9000}]}}]
    assert applying.needed(memo, "uid", changed, _deployment(1)), "a new rendering is applied"
    assert applying.needed(memo, "uid", CHILDREN, _deployment(2)), "an edited Deployment is put back"
    assert applying.needed(memo, "uid", CHILDREN, None), "a deleted Deployment is recreated"


def test_full_resync_after_the_period(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = kopf.Memo()
    applying.record(memo, "uid", CHILDREN, None)
    monkeypatch.setattr(applying, "FULL_RESYNC_SECONDS", -1.0)
    assert applying.needed(memo, "uid", CHILDREN, None)


def test_forget_starts_over() -> None:
    memo = kopf.Memo()
    applying.record(memo, "uid", CHILDREN, None)
    applying.forget(memo, "uid")
    assert applying.needed(memo, "uid", CHILDREN, None)


def test_a_rejected_rendering_is_not_sent_again_until_it_changes() -> None:
    memo = kopf.Memo()
    applying.record(memo, "uid", CHILDREN, None, error="Service m: spec.ports[0].port: Invalid value")
    assert not applying.needed(memo, "uid", CHILDREN, None), "the same rejected rendering is not re-applied"
    assert applying.rejected(memo, "uid", CHILDREN) == "Service m: spec.ports[0].port: Invalid value"
    changed = [{**CHILDREN[0], "spec": {"ports": [{"port": 9000}]}}]
    assert applying.needed(memo, "uid", changed, None) and applying.rejected(memo, "uid", changed) is None
    applying.record(memo, "uid", changed, None)
    assert applying.rejected(memo, "uid", changed) is None


TWO = [
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "m"}, "spec": {"replicas": 1}},
    *CHILDREN,
]


def _with_replicas(replicas: int) -> list[dict[str, Any]]:
    return [{**TWO[0], "spec": {"replicas": replicas}}, TWO[1]]


def test_a_change_applies_the_changed_child_alone_and_the_full_resync_still_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memo, now = kopf.Memo(), [1000.0]
    monkeypatch.setattr(applying.time, "monotonic", lambda: now[0])
    assert applying.pending(memo, "uid", TWO, _deployment(1)) == TWO, "the first pass applies everything"
    applying.record(memo, "uid", TWO, _deployment(1))
    assert applying.pending(memo, "uid", TWO, _deployment(1)) == []
    for step, replicas in enumerate((2, 1, 2)):
        now[0] += 90.0
        rendering = _with_replicas(replicas)
        assert applying.pending(memo, "uid", rendering, _deployment(1)) == rendering[:1], "only the Deployment"
        applying.record(memo, "uid", rendering, _deployment(1), every_child=False)
        if step == 1:
            assert applying.pending(memo, "uid", rendering, _deployment(1)) == []
    now[0] += 40.0  # over FULL_RESYNC_SECONDS since every child was applied, though the last apply was 40 s ago
    assert applying.pending(memo, "uid", _with_replicas(1), _deployment(1)) == _with_replicas(1)


def test_everything_is_applied_again_when_the_deployment_moved_or_a_rendering_was_rejected() -> None:
    memo = kopf.Memo()
    applying.record(memo, "uid", TWO, _deployment(1))
    assert applying.pending(memo, "uid", TWO, _deployment(2)) == TWO, "someone edited the Deployment"
    assert applying.pending(memo, "uid", TWO, None) == TWO, "someone deleted it"
    applying.record(memo, "uid", TWO, _deployment(1), error="Service m: spec.ports[0].port: Invalid value")
    fixed = _with_replicas(3)
    assert applying.pending(memo, "uid", fixed, _deployment(1)) == fixed
