"""Skip re-applying unchanged children: apply what the rendering changed, and everything when the Deployment changed
or every few minutes.

The endpoint's status loop runs on every event of its children and every few seconds; re-applying every child on each
pass would cost the API server ~10 requests per endpoint per pass for nothing. A child is re-applied when its own
rendered manifest changed (a `replicas` change applies the Deployment alone). Every child is re-applied when the
Deployment's generation moved (someone edited or deleted it), after an operator restart (the memory is per process),
after a rejected rendering, and at least every `FULL_RESYNC_SECONDS` to correct drift in the other children.

A rendering the API server rejected is remembered with its error (`record(..., error=...)`): it is not sent again
until it changes (or the full resync comes), and the reconcile reports the error in status instead (`rejected`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

FULL_RESYNC_SECONDS = 300.0

_guard = threading.Lock()


@dataclass(frozen=True)
class Applied:
    """What was last applied for one endpoint: the whole rendering's digest, each child's, and when all were."""

    digest: str
    deployment_generation: int | None
    at: float
    error: str | None = None
    children: Mapping[str, str] = field(default_factory=dict)


def digest(children: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(children, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _child_key(child: Mapping[str, Any]) -> str:
    return f"{child['apiVersion']}/{child['kind']}/{child['metadata']['name']}"


def _child_digests(children: list[dict[str, Any]]) -> dict[str, str]:
    return {_child_key(child): digest([child]) for child in children}


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


def pending(
    memo: kopf.Memo, uid: str, children: list[dict[str, Any]], deployment: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The children to apply now: none when nothing changed, the changed ones when only their rendering changed,
    all of them when the Deployment moved, after a restart or a rejected rendering, and on the full resync."""
    if not needed(memo, uid, children, deployment):
        return []
    last = _memory(memo).get(uid)
    if (
        last is None
        or last.error is not None
        or last.deployment_generation != _generation(deployment)
        or time.monotonic() - last.at > FULL_RESYNC_SECONDS
    ):
        return list(children)
    return [child for child in children if last.children.get(_child_key(child)) != digest([child])]


def record(
    memo: kopf.Memo,
    uid: str,
    children: list[dict[str, Any]],
    deployment: Mapping[str, Any] | None,
    error: str | None = None,
    *,
    every_child: bool = True,
) -> None:
    """Remember an apply: successful, or rejected by the API server with `error`. An apply of some children only
    (``every_child=False``) keeps the time of the last apply of all, so the full resync still comes."""
    last = _memory(memo).get(uid)
    at = time.monotonic() if every_child or last is None else last.at
    _memory(memo)[uid] = Applied(digest(children), _generation(deployment), at, error, _child_digests(children))


def rejected(memo: kopf.Memo, uid: str, children: list[dict[str, Any]]) -> str | None:
    """The API server's error when exactly this rendering was rejected last time; else None."""
    last = _memory(memo).get(uid)
    return last.error if last is not None and last.digest == digest(children) else None


def forget(memo: kopf.Memo, uid: str) -> None:
    _memory(memo).pop(uid, None)
