"""Skip re-applying unchanged children: apply when the rendered state or the Deployment changed, or every few minutes.

The endpoint timer runs every few seconds so that the deployment gate opens promptly; re-applying every child on each
tick would cost the API server ~10 requests per endpoint per tick for nothing. A child is re-applied when its rendered
manifest changed, when the Deployment's generation moved (someone edited or deleted it), after an operator restart
(the memory is per process), and at least every `FULL_RESYNC_SECONDS` to correct drift in the other children.

A rendering the API server rejected is remembered with its error (`record(..., error=...)`): it is not sent again
until it changes (or the full resync comes), and the reconcile reports the error in status instead (`rejected`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

FULL_RESYNC_SECONDS = 300.0

_guard = threading.Lock()


@dataclass(frozen=True)
class Applied:
    """What was last applied for one endpoint."""

    digest: str
    deployment_generation: int | None
    at: float
    error: str | None = None


def digest(children: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(children, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _generation(deployment: Mapping[str, Any] | None) -> int | None:
    return int(deployment["metadata"].get("generation", 0)) if deployment is not None else None


def _memory(memo: kopf.Memo) -> dict[str, Applied]:
    with _guard:
        memory: dict[str, Applied] = memo.setdefault("applied_children", {})
        return memory


def needed(memo: kopf.Memo, uid: str, children: list[dict[str, Any]], deployment: Mapping[str, Any] | None) -> bool:
    """Whether the children must be applied now."""
    last = _memory(memo).get(uid)
    return (
        last is None
        or last.digest != digest(children)
        or last.deployment_generation != _generation(deployment)
        or time.monotonic() - last.at > FULL_RESYNC_SECONDS
    )


def record(
    memo: kopf.Memo,
    uid: str,
    children: list[dict[str, Any]],
    deployment: Mapping[str, Any] | None,
    error: str | None = None,
) -> None:
    """Remember an apply: successful, or rejected by the API server with `error`."""
    _memory(memo)[uid] = Applied(digest(children), _generation(deployment), time.monotonic(), error)


def rejected(memo: kopf.Memo, uid: str, children: list[dict[str, Any]]) -> str | None:
    """The API server's error when exactly this rendering was rejected last time; else None."""
    last = _memory(memo).get(uid)
    return last.error if last is not None and last.digest == digest(children) else None


def forget(memo: kopf.Memo, uid: str) -> None:
    _memory(memo).pop(uid, None)
