"""What every controller's handlers share: the per-object lock, the clock, spec parsing, errors, the status write.

- One lock per object, so its change handlers, timer and finalizer never interleave.
- One clock: UTC, whole seconds (the precision of Kubernetes timestamps).
- Specs are validated into their pydantic model; a spec that does not validate is a `kopf.PermanentError`.
- One mapping of storage errors to kopf errors: while reconciling, `Invalid` (the API server rejected what the spec
  rendered) needs a spec change, so it is a `kopf.PermanentError`; every other storage error is a `kopf.TemporaryError`,
  retried in a few seconds. A finalizer retries every storage error: kopf releases an object whose delete handler
  failed permanently, which would leave its files, labels or children behind.
- Status is written with a merge patch, and only when it changed; the patch removes what the new status no longer
  holds at every depth, so nothing of an earlier cache or generation survives in a nested field.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import kopf
from pydantic import ValidationError

from warmstart.api import API_VERSION
from warmstart.api.base import ApiModel
from warmstart.controllers.storage import Invalid, StorageError, Store

#: seconds before kopf retries a handler that hit a temporary storage error
RETRY_DELAY_SECONDS = 5

Model = TypeVar("Model", bound=ApiModel)

_locks_guard = threading.Lock()


def lock(memo: kopf.Memo, uid: str) -> threading.Lock:
    """The lock of one object (kopf gives each object its own memo; the uid keeps objects apart regardless)."""
    with _locks_guard:
        locks: dict[str, threading.Lock] = memo.setdefault("locks", {})
        return locks.setdefault(uid, threading.Lock())


def now() -> dt.datetime:
    """The current time in UTC, in whole seconds."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def timestamp(moment: dt.datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes timestamps."""
    return moment.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_timestamp(text: str | None) -> dt.datetime | None:
    """A timestamp written by `timestamp` (or by Kubernetes); None when absent."""
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def deleting(body: Mapping[str, Any]) -> bool:
    """Whether the object is being deleted (its finalizer runs; reconciling it would recreate what goes away)."""
    return bool(body.get("metadata", {}).get("deletionTimestamp"))


def spec(body: Mapping[str, Any], model: type[Model]) -> Model:
    """The body's spec as its model; a spec that does not validate needs a spec change (PermanentError)."""
    try:
        return model.model_validate(body.get("spec") or {})
    except ValidationError as error:
        raise kopf.PermanentError(f"invalid spec: {error.errors()[:3]}") from error


def stored_status(body: Mapping[str, Any], model: type[Model]) -> Model | None:
    """The body's status as its model; None when there is none yet, or it does not validate."""
    if not body.get("status"):
        return None
    try:
        return model.model_validate(body["status"])
    except ValidationError:
        return None


@contextlib.contextmanager
def api_errors(action: str, *, finalizing: bool = False) -> Iterator[None]:
    """Turn storage errors into kopf errors: Invalid is permanent (unless finalizing), everything else is retried."""
    try:
        yield
    except Invalid as error:
        if finalizing:
            raise kopf.TemporaryError(
                f"{action}: the API server rejected it: {error}", delay=RETRY_DELAY_SECONDS
            ) from error
        raise kopf.PermanentError(f"{action}: the API server rejected it: {error}") from error
    except StorageError as error:
        raise kopf.TemporaryError(f"{action}: {type(error).__name__}: {error}", delay=RETRY_DELAY_SECONDS) from error


def patch_status(store: Store, kind: str, body: Mapping[str, Any], fields: Mapping[str, Any]) -> None:
    """Merge-patch these fields into the object's status (None removes a field)."""
    meta = body["metadata"]
    store.merge_patch(
        API_VERSION, kind, meta["name"], {"status": dict(fields)}, meta["namespace"], subresource="status"
    )


def write_status(
    store: Store, kind: str, body: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]
) -> bool:
    """Write `new` when it differs from `old`; fields of `old` missing from `new` are removed, nested ones included.
    True when written."""
    if dict(old) == dict(new):
        return False
    patch_status(store, kind, body, merge_patch(old, new))
    return True


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: a key of `old` that `new` lacks becomes None at
    every depth (a plain `{**new}` would leave nested keys of `old` behind); lists and scalars are replaced."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    return patch
