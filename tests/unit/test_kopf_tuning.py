"""The toggle set that wakes kopf's waiting workers only when its state turns, and the lean diff base."""

from __future__ import annotations

import asyncio
import copy
import importlib.metadata
import json
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching

from warmstart.controllers import kopf_relisting, kopf_tuning


def test_the_pinned_kopf_is_the_release_the_toggle_set_was_written_against() -> None:
    # a kopf upgrade must re-read aiotoggles.ToggleSet (and may no longer need the replacement)
    assert importlib.metadata.version("kopf") == kopf_tuning.KOPF_VERSION


def test_install_makes_kopf_create_the_flip_notifying_set_and_use_the_relisting_watch() -> None:
    original, original_watch = aiotoggles.ToggleSet, watching.continuous_watch
    try:
        assert kopf_tuning.install()
        assert aiotoggles.ToggleSet is kopf_tuning.FlipNotifyingToggleSet
        assert watching.continuous_watch is kopf_relisting.continuous_watch
    finally:
        aiotoggles.ToggleSet = original  # type: ignore[misc]
        watching.continuous_watch = original_watch


class CountingSet(kopf_tuning.FlipNotifyingToggleSet):
    checks = 0

    def is_on(self) -> bool:
        type(self).checks += 1
        return super().is_on()


class CountingKopfSet(aiotoggles.ToggleSet):
    checks = 0

    def is_on(self) -> bool:
        type(self).checks += 1
        return super().is_on()


async def _prepopulate(toggle_set: aiotoggles.ToggleSet, objects: int) -> list[asyncio.Task[None]]:
    """kopf's pre-population: a toggle per object; each object's worker drops its own, then waits for the set."""
    toggles = [await toggle_set.make_toggle(name=str(i)) for i in range(objects)]
    waiters: list[asyncio.Task[None]] = []
    for toggle in toggles:
        await toggle_set.drop_toggle(toggle)
        waiters.append(asyncio.create_task(toggle_set.wait_for(True)))
        await asyncio.sleep(0)  # the worker reaches its wait before the next object is indexed
    return waiters


async def test_waiters_wake_when_the_last_toggle_is_dropped_and_not_before() -> None:
    toggle_set = kopf_tuning.FlipNotifyingToggleSet(all)
    blocker = await toggle_set.make_toggle(name="resource listed")
    waiters = await _prepopulate(toggle_set, 20)
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiters)
    await toggle_set.drop_toggle(blocker)
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)


async def test_pre_population_checks_grow_linearly_not_with_the_square_of_the_objects() -> None:
    async def checks(set_class: type[CountingSet] | type[CountingKopfSet], objects: int) -> int:
        set_class.checks = 0
        toggle_set = set_class(all)
        blocker = await toggle_set.make_toggle(name="resource listed")
        waiters = await _prepopulate(toggle_set, objects)
        await toggle_set.drop_toggle(blocker)
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=30)
        return set_class.checks

    ours_small, ours_large = await checks(CountingSet, 100), await checks(CountingSet, 400)
    kopf_small, kopf_large = await checks(CountingKopfSet, 100), await checks(CountingKopfSet, 400)
    assert ours_large <= 4.5 * ours_small  # 4x the objects
    assert kopf_large >= 12 * kopf_small  # kopf's own set: the square (this is what the replacement is for)
    assert ours_large * 20 < kopf_large


async def test_a_new_off_toggle_wakes_those_waiting_for_off_and_a_toggle_turning_wakes_its_set() -> None:
    toggle_set = kopf_tuning.FlipNotifyingToggleSet(all)
    off_waiter = asyncio.create_task(toggle_set.wait_for(False))
    await asyncio.sleep(0)
    toggle = await toggle_set.make_toggle(name="paused")
    await asyncio.wait_for(off_waiter, timeout=5)
    on_waiter = asyncio.create_task(toggle_set.wait_for(True))
    await asyncio.sleep(0)
    await toggle.turn_to(True)  # the toggle notifies the shared condition itself
    await asyncio.wait_for(on_waiter, timeout=5)


def _bodies() -> list[dict[str, Any]]:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "images": [{"names": ["a"]}] * 3},
    }
    endpoint = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1",
        "kind": "InferenceEndpointConfig",
        "metadata": {
            "name": "e",
            "namespace": "ns",
            "generation": 3,
            "finalizers": ["x/warmstart"],
            "annotations": {
                "warmstart.inference.sagemaker.aws.amazon.com/last-handled-configuration": json.dumps({"spec": {}}),
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "team": "a",
            },
        },
        "spec": {"replicas": 2, "worker": {"image": "i", "env": [{"name": "A", "value": "1"}]}},
        "status": {"observedGeneration": 2},
    }
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "ownerReferences": [{"kind": "Deployment", "name": "d"}]},
        "spec": {"replicas": 1},
    }
    bare = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    return [node, endpoint, replica_set, bare]


@pytest.mark.parametrize("body", _bodies(), ids=lambda b: str(b["kind"]))
@pytest.mark.parametrize("extra_fields", [None, [("spec", "replicas")], [("status", "observedGeneration")]])
def test_the_lean_diff_base_is_kopfs_own(body: dict[str, Any], extra_fields: list[tuple[str, ...]] | None) -> None:
    settings = {"prefix": "warmstart.inference.sagemaker.aws.amazon.com", "key": "last-handled-configuration"}
    original = copy.deepcopy(body)
    kopfs = kopf.AnnotationsDiffBaseStorage(**settings).build(body=kopf.Body(body), extra_fields=extra_fields)
    lean = kopf_tuning.LeanDiffBaseStorage(**settings).build(body=kopf.Body(body), extra_fields=extra_fields)
    assert lean == kopfs
    assert body == original  # the watched body is never changed


def test_the_lean_body_keeps_no_status_and_only_the_metadata_the_essence_uses() -> None:
    node = _bodies()[0]
    lean = kopf_tuning.lean_body(node)
    assert "status" not in lean
    assert set(lean["metadata"]) == {"labels", "annotations"}
    assert lean["spec"] is node["spec"]  # shallow: kopf's build copies what it keeps
