"""Status loops wake on events: what wakes what (pure), and the loop itself (real asyncio, no Kubernetes)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from kopf._cogs.aiokits import aioenums

from warmstart.controllers import waking
from warmstart.render import daemonsets, labels, names

LOGGER = logging.getLogger("test-waking")


def test_a_deployment_wakes_its_controlling_endpoint_only() -> None:
    meta = {
        "ownerReferences": [
            {"kind": "InferenceEndpointConfig", "name": "llama", "controller": True},
            {"kind": "Other", "name": "x", "controller": False},
        ]
    }
    assert waking.deployment_owner("team-a", meta) == [("inferenceendpointconfig", "team-a", "llama")]


def test_a_model_pod_wakes_its_endpoint_through_its_labels() -> None:
    long_name = "m" * 80
    pod_labels = {labels.ENDPOINT_LABEL: names.label_value(long_name), labels.ENDPOINT_KIND_LABEL: "jumpstartmodel"}
    assert waking.endpoint_pod_owner("ns", pod_labels) == [waking.endpoint_key("JumpStartModel", "ns", long_name)]
    assert waking.endpoint_pod_owner("ns", {}) == []


def test_a_cache_wakes_every_parent_endpoint() -> None:
    spec = {
        "parentReferences": [
            {"kind": "InferenceEndpointConfig", "name": "a", "uid": "1"},
            {"kind": "JumpStartModel", "name": "b", "uid": "2"},
        ]
    }
    assert waking.cache_parents("ns", spec) == [
        ("inferenceendpointconfig", "ns", "a"),
        ("jumpstartmodel", "ns", "b"),
    ]


def test_jobs_and_prepull_pods_wake_their_caches_under_the_keys_the_caches_follow() -> None:
    long_cache = "c" * 90
    job_labels = {labels.MDCC_LABEL: names.label_value(long_cache)}
    assert waking.job_cache("ns", job_labels) == [waking.weights_cache_key("ns", long_cache)]
    pod_labels = {labels.MIC_LABEL: daemonsets.mic_label_value(long_cache)}
    assert waking.prepull_pod_cache("ns", pod_labels) == [waking.image_cache_key("ns", long_cache)]


def test_only_a_changed_cache_status_counts() -> None:
    wakeups = waking.Wakeups()
    assert wakeups.status_changed("u", {"state": "Pending"})
    assert not wakeups.status_changed("u", {"state": "Pending"})
    assert wakeups.status_changed("u", {"state": "Ready"})
    assert wakeups.status_changed("u", None), "a deleted cache counts once"
    assert not wakeups.status_changed("u", None)


class Stopped:
    """kopf's own stop flag of an async daemon, and its setter."""

    def __init__(self) -> None:
        self.setter: aioenums.FlagSetter[Any] = aioenums.FlagSetter()
        self.waiter = aioenums.AsyncFlagWaiter(self.setter)

    def set(self) -> None:
        self.setter.set()


def test_a_wake_up_runs_the_step_long_before_the_interval() -> None:
    async def scenario() -> list[float]:
        wakeups, stopped, runs = waking.Wakeups(), Stopped(), []
        wanted = waking.endpoint_key("InferenceEndpointConfig", "ns", "e")
        loop = asyncio.create_task(
            waking.follow(wakeups, wanted, 3600.0, stopped.waiter, lambda: runs.append(time.monotonic()), LOGGER)
        )
        await asyncio.sleep(0.05)
        assert runs == [], "nothing runs before a wake-up or the interval"
        woken_at = time.monotonic()
        assert wakeups.wake([wanted, ("other", "ns", "x")]) == 1
        for _ in range(3000):  # up to 30 s on a busy machine
            if runs:
                break
            await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(loop, 5)
        assert wakeups.wake([wanted]) == 0, "a stopped loop is forgotten"
        return [run - woken_at for run in runs]

    delays = asyncio.run(scenario())
    assert len(delays) == 1 and delays[0] < 60, "woken at once, not after the hour-long interval"


def test_the_interval_is_the_safety_net_and_a_failing_step_does_not_end_the_loop() -> None:
    async def scenario() -> int:
        wakeups, stopped, calls = waking.Wakeups(), Stopped(), []

        def step() -> None:
            calls.append(threading.get_ident())
            raise RuntimeError("the API server is away")

        wanted = waking.image_cache_key("ns", "c")
        loop = asyncio.create_task(waking.follow(wakeups, wanted, 0.01, stopped.waiter, step, LOGGER))
        while len(calls) < 3:
            await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(loop, 5)
        assert threading.get_ident() not in calls, "steps run in a thread, never on the event loop"
        return len(calls)

    assert asyncio.run(scenario()) >= 3


def test_a_stop_ends_a_waiting_loop_at_once() -> None:
    async def scenario() -> None:
        stopped = Stopped()
        loop = asyncio.create_task(
            waking.follow(waking.Wakeups(), ("k", "n", "m"), 3600.0, stopped.waiter, lambda: None, LOGGER)
        )
        await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(loop, 5)

    asyncio.run(scenario())


def test_turns_that_are_not_due_take_no_thread() -> None:
    """A loop with a due check asks it on the event loop each turn and runs the step only on the turns it allows."""

    async def scenario() -> tuple[int, int, set[int]]:
        wakeups, stopped, asked, steps = waking.Wakeups(), Stopped(), [], []
        wanted = waking.weights_cache_key("ns", "c")

        def due() -> bool:
            asked.append(threading.get_ident())
            return len(asked) % 5 == 0

        loop = asyncio.create_task(
            waking.follow(wakeups, wanted, 0.01, stopped.waiter, lambda: steps.append(1), LOGGER, due=due)
        )
        while len(asked) < 20:
            await asyncio.sleep(0.01)
        stopped.set()
        await asyncio.wait_for(loop, 5)
        return len(asked), len(steps), set(asked)

    asked, steps, threads = asyncio.run(scenario())
    assert threads == {threading.get_ident()}, "the due check runs on the event loop"
    assert steps == asked // 5, "the step runs on the due turns only"
