"""The controllers' shared handling: status is written only when it changed, and API errors map to retry or give-up.

A recording stand-in replaces the API client's merge patch; nothing else is faked.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from warmstart.api.caches import ModelImageCacheSpec, ModelImageCacheStatus
from warmstart.controllers import handling
from warmstart.controllers.storage import Conflict, Forbidden, Invalid, NotFound, Store, Unavailable

BODY = {"metadata": {"name": "c", "namespace": "ns", "uid": "u-1"}}


class RecordingStore(Store):
    """Records merge patches instead of sending them."""

    def __init__(self) -> None:
        super().__init__(api=None)
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        self.patches.append((kind, name, patch, subresource))
        return {}


def test_unchanged_status_writes_nothing() -> None:
    store = RecordingStore()
    assert not handling.write_status(
        store, "ModelImageCache", BODY, {"state": "Ready", "readyNodes": 2}, {"readyNodes": 2, "state": "Ready"}
    )
    assert store.patches == []


def test_changed_status_is_patched_on_the_status_subresource_and_dropped_fields_are_removed() -> None:
    store = RecordingStore()
    assert handling.write_status(
        store, "ModelImageCache", BODY, {"state": "Pending", "message": "pulling"}, {"state": "Ready"}
    )
    assert store.patches == [("ModelImageCache", "c", {"status": {"message": None, "state": "Ready"}}, "status")]


@pytest.mark.parametrize("error", [Unavailable("503"), Conflict("409"), Forbidden("403"), NotFound("404")])
def test_api_errors_that_may_pass_are_retried_soon(error: Exception) -> None:
    with pytest.raises(kopf.TemporaryError) as raised, handling.api_errors("reconciling"):
        raise error
    assert raised.value.delay == handling.RETRY_DELAY_SECONDS


def test_a_rejected_object_needs_a_spec_change() -> None:
    with pytest.raises(kopf.PermanentError, match="the API server rejected it"), handling.api_errors("reconciling"):
        raise Invalid("spec.template: Invalid value")


@pytest.mark.parametrize("error", [Invalid("422"), Unavailable("503"), NotFound("404")])
def test_a_finalizer_never_gives_up(error: Exception) -> None:
    """kopf releases an object whose delete handler failed permanently: its files and labels would stay behind."""
    with pytest.raises(kopf.TemporaryError), handling.api_errors("releasing", finalizing=True):
        raise error


def test_an_invalid_spec_is_permanent_and_a_valid_one_is_its_model() -> None:
    with pytest.raises(kopf.PermanentError, match="invalid spec"):
        handling.spec({**BODY, "spec": {}}, ModelImageCacheSpec)
    assert (
        handling.spec({**BODY, "spec": {"image": "vllm/vllm-openai:v0.6.0"}}, ModelImageCacheSpec).image
        == "vllm/vllm-openai:v0.6.0"
    )


def test_a_missing_or_unreadable_status_reads_as_none() -> None:
    assert handling.stored_status(BODY, ModelImageCacheStatus) is None
    assert handling.stored_status({**BODY, "status": {"readyNodes": "many"}}, ModelImageCacheStatus) is None
    assert handling.stored_status(
        {**BODY, "status": {"readyNodes": 3}}, ModelImageCacheStatus
    ) == ModelImageCacheStatus(ready_nodes=3)


def test_one_lock_per_object() -> None:
    memo = kopf.Memo()
    assert handling.lock(memo, "a") is handling.lock(memo, "a")
    assert handling.lock(memo, "a") is not handling.lock(memo, "b")


def test_timestamps_are_whole_seconds_in_utc() -> None:
    moment = handling.now()
    assert moment.microsecond == 0
    text = handling.timestamp(moment)
    assert text.endswith("Z") and handling.parse_timestamp(text) == moment


def test_a_nested_field_the_new_status_lacks_is_removed() -> None:
    """A source change: the old cache's nested `state: Ready` must not survive into the new cache's status."""
    store = RecordingStore()
    old = {
        "state": "DeploymentComplete",
        "weightsCacheStatus": {"name": "weights-old", "state": "Ready", "readyNodes": 4, "targetNodes": 4},
    }
    new = {"state": "DeploymentInProgress", "weightsCacheStatus": {"name": "weights-new", "readyNodes": 0}}
    assert handling.write_status(store, "InferenceEndpointConfig", BODY, old, new)
    [(_, _, patch, _)] = store.patches
    assert patch == {
        "status": {
            "state": "DeploymentInProgress",
            "weightsCacheStatus": {"name": "weights-new", "readyNodes": 0, "state": None, "targetNodes": None},
        }
    }


def test_the_merge_patch_turns_the_old_status_into_the_new_one() -> None:
    """Applied as the API server applies a merge patch (RFC 7386), the patch yields exactly the new status."""

    def apply(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        result = dict(target)
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            elif isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = apply(result[key], value)
            else:
                result[key] = value
        return result

    old = {"a": {"b": {"c": 1, "d": 2}, "e": [1, 2]}, "f": "x", "g": {"h": 1}}
    new = {"a": {"b": {"c": 3}, "e": [3]}, "g": "scalar now", "i": {"j": 1}}
    assert apply(old, handling.merge_patch(old, new)) == new
