"""Two owners rendering the same child name: `owners.taken_by_another` says when an apply would take a child over."""

from __future__ import annotations

from typing import Any

from warmstart.render import owners


def _child(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "a-models", "ownerReferences": list(refs)}}


A = owners.owner_reference("InferenceEndpointConfig", "a", "uid-a", controller=True)
B = owners.owner_reference("InferenceEndpointConfig", "a-models", "uid-b", controller=True)
SHARED = owners.owner_reference("InferenceEndpointConfig", "a-models", "uid-b", controller=False)


def test_another_controller_is_named() -> None:
    assert owners.taken_by_another(_child(A), _child(B)) == A


def test_the_same_controller_nothing_yet_or_no_controller_is_not_a_conflict() -> None:
    assert owners.taken_by_another(_child(A), _child(A)) is None
    assert owners.taken_by_another(None, _child(B)) is None
    assert owners.taken_by_another(_child(), _child(B)) is None  # made by hand or an older release: taken over
    assert owners.taken_by_another(_child(A), _child(SHARED)) is None  # shared children are attached, not applied
