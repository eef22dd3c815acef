"""What keeps one reconcile's work to its own nodes and its writes concurrent but bounded (a 2,000-node fleet).

- a cache targeting instance types reads only those nodes (and the nodes where a model pod waits for it);
- a targeting the instance-type index cannot narrow (another label, a term without an `In` on the instance type)
  reads every node, so nothing is missed;
- per-node writes run at most `WRITE_CONCURRENCY` at once, keep their order, run every step, see the caller's
  context variables (kopf's Events and logger rely on them), and raise the first failure;
- kopf's success line of a wake-up handler is dropped from the log, its failures and other handlers' lines are not.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from typing import Any

import pytest

from warmstart.api.nodelabels import INSTANCE_TYPE
from warmstart.api.scheduling import NodeAffinity
from warmstart.controllers import fanout, nodes, running
from warmstart.placement import instance_type_affinity


def _node(name: str, instance_type: str, **extra: Any) -> dict[str, Any]:
    labels = {INSTANCE_TYPE: instance_type, **extra}
    body = {"metadata": {"name": name}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    return {"name": name, "labels": labels, "annotations": {}, "body": body}


def _indexes(fleet: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The two node indexes as kopf keeps them: key -> a collection of values."""
    by_name: dict[str, list[Any]] = {}
    by_type: dict[str, list[Any]] = {}
    for node in fleet:
        for key, value in nodes.node_facts(**node).items():
            by_name.setdefault(key, []).append(value)
        for instance_type, name in nodes.nodes_by_instance_type(**node).items():
            by_type.setdefault(instance_type, []).append(name)
    return by_name, by_type


FLEET = [_node(f"a{i}", "ml.a.24xlarge") for i in range(3)] + [
    _node(f"b{i}", "ml.b.24xlarge", zone="z1") for i in range(3)
]


def test_a_cache_on_instance_types_reads_only_their_nodes_and_its_waiting_pods_nodes() -> None:
    by_name, by_type = _indexes(FLEET)
    wanted = nodes.targeted_instance_types(None, instance_type_affinity(["ml.a.24xlarge"]))
    assert wanted == frozenset({"ml.a.24xlarge"})
    found = [f.name for f in nodes.candidates(by_name, by_type, wanted, also=["b1", "gone"])]
    assert found == ["a0", "a1", "a2", "b1"]


def test_a_node_selector_on_the_instance_type_narrows_too() -> None:
    assert nodes.targeted_instance_types({INSTANCE_TYPE: "ml.b.24xlarge", "zone": "z1"}, None) == frozenset(
        {"ml.b.24xlarge"}
    )


@pytest.mark.parametrize(
    "selector,affinity",
    [
        (None, None),  # no targeting: every node
        ({"zone": "z1"}, None),  # another label
        (
            None,  # two terms, one of them not on the instance type: a node of any type may match it
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": ["ml.a.24xlarge"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                    ]
                }
            },
        ),
        (
            None,  # NotIn on the instance type does not narrow
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "NotIn", "values": ["ml.a.24xlarge"]}]}
                    ]
                }
            },
        ),
    ],
)
def test_a_targeting_the_index_cannot_narrow_reads_every_node(
    selector: dict[str, str] | None, affinity: dict[str, Any] | None
) -> None:
    parsed = NodeAffinity.model_validate(affinity) if affinity else None
    assert nodes.targeted_instance_types(selector, parsed) is None
    by_name, by_type = _indexes(FLEET)
    assert sorted(f.name for f in nodes.candidates(by_name, by_type, None)) == [n["name"] for n in FLEET]


def test_a_node_being_deleted_is_no_candidate() -> None:
    leaving = _node("a9", "ml.a.24xlarge")
    leaving["body"]["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    by_name, by_type = _indexes([*FLEET, leaving])
    assert "a9" not in {f.name for f in nodes.candidates(by_name, by_type, {"ml.a.24xlarge"})}
    assert nodes.lookup(by_name, "a1") is not None and nodes.lookup(by_name, "nope") is None


def test_writes_run_concurrently_but_never_more_than_the_bound() -> None:
    lock = threading.Lock()
    running_now, peak = 0, 0

    def step(item: int) -> int:
        nonlocal running_now, peak
        with lock:
            running_now += 1
            peak = max(peak, running_now)
        time.sleep(0.02)
        with lock:
            running_now -= 1
        return item * 2

    items = list(range(5 * fanout.WRITE_CONCURRENCY))
    assert fanout.each(items, step) == [i * 2 for i in items]
    assert 1 < peak <= fanout.WRITE_CONCURRENCY


def test_every_step_runs_and_the_first_failure_is_raised_with_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("handler")
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    def step(item: int) -> int:
        with lock:
            seen.append((item, var.get("missing")))
        if item in (3, 7):
            raise ValueError(f"step {item}")
        return item

    with pytest.raises(ValueError, match="step 3"):
        fanout.each(list(range(10)), step)
    assert sorted(seen) == [(i, "handler") for i in range(10)]


def _record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


def test_only_the_wakeup_handlers_success_lines_are_dropped() -> None:
    assert not running.quiet_wakeups(_record("Handler 'wake_cache_of_job' succeeded."))
    assert running.quiet_wakeups(_record("Handler 'wake_cache_of_job' failed: boom", logging.ERROR))
    assert running.quiet_wakeups(_record("Handler 'reconcile_weights_cache' succeeded."))


async def test_a_reconcile_in_its_own_threads_sees_the_handlers_context() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from warmstart.controllers import waking

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("handler")
    seen: list[tuple[str, str]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="own") as pool:
        await waking.in_thread(lambda: seen.append((threading.current_thread().name, var.get("missing"))), pool)
    assert seen[0][0].startswith("own") and seen[0][1] == "handler"
