"""The operator starts over when the discovery kopf read at its start lacks a resource the API server serves.

An operator that starts while the API server restarts reads a discovery without some groups (batch, the CRDs); kopf
resolves its resources once, so it would never watch them while its liveness stays green
(controllers/running.py). This drives that logic against the real control plane: the operator's watchdog reads kopf's
insights, asks the real API server whether the lacking resource is served (`discovery.served`) and halts kopf, and
`running.run` starts it again. The one thing faked is what a restarting API server cannot be made to do on cue: the
first discovery kopf reads loses `jobs` (kopf's insights object drops it as it finishes the initial listing).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from kopf._cogs.structs import references

import kube
import operating
from warmstart.controllers import running

pytestmark = pytest.mark.cluster

LOST = "jobs"


def _names(resources: set[references.Resource]) -> set[str]:
    return {resource.plural for resource in resources}


class _LosesJobs(asyncio.Event):
    """`ready_resources` of the first start: when kopf sets it, the initial listing it read had no `jobs`."""

    insights: references.Insights

    def set(self) -> None:
        for resources in (self.insights.watched_resources, self.insights.indexed_resources):
            resources.difference_update({r for r in resources if r.plural == LOST and r.group == "batch"})
        super().set()


def test_an_operator_whose_first_discovery_lacked_jobs_starts_over_and_then_watches_them(
    cluster: Any, namespace: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made: list[references.Insights] = []
    real = references.Insights

    def insights() -> references.Insights:
        if made:
            fresh = real()
        else:  # kopf's Insights is frozen: the event is given at construction, and told its insights after
            lossy = _LosesJobs()
            fresh = real(ready_resources=lossy)
            lossy.insights = fresh
        made.append(fresh)
        return fresh

    monkeypatch.setattr(running.kopf_references, "Insights", insights)
    caplog.set_level(logging.ERROR, logger=running.__name__)
    with operating.operator(str(cluster.kubeconfig), [namespace]):
        kube.wait_for(
            lambda: len(made) >= 2 and made[1].ready_resources.is_set(),
            what="the operator to start over after an incomplete discovery",
            timeout=120,
        )
        first, second = made[0], made[1]
        assert LOST not in _names(first.watched_resources | first.indexed_resources)
        assert LOST in _names(second.watched_resources) and LOST in _names(second.indexed_resources)
        assert len(made) == 2, "the operator started over again, with a complete discovery"
    restarts = [r.getMessage() for r in caplog.records if "starting over" in r.getMessage()]
    assert restarts == [f"the API server's discovery lacked {LOST} (it was starting?); starting over"]
