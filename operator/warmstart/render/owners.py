"""Owner references to warmstart's custom resources, built in one place.

Two kinds, and `controller` decides both flags:
- controller (`controller: true`, `blockOwnerDeletion: true`): the child is managed by this one owner (a model
  Deployment by its endpoint, a pre-pull DaemonSet by its image cache); a foreground deletion of the owner waits for it;
- plain (`controller: false`, `blockOwnerDeletion: false`): the child only dies with the owner (a preload Job with its
  cache, a shared cache with each of its endpoints) and stays free for other owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warmstart.api import API_VERSION


def owner_reference(kind: str, name: str, uid: str, *, controller: bool) -> dict[str, Any]:
    """An ownerReferences entry for the warmstart object `kind`/`name` with `uid`."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def controller_of(manifest: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The ownerReferences entry with `controller: true` of `manifest`, if any."""
    refs = ((manifest or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def taken_by_another(existing: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller of `existing` when it is not `wanted`'s controller: two owners render the same child name.

    None when nothing exists yet, when `wanted` has no controller (a shared child) or when the controllers agree.
    """
    mine, theirs = controller_of(wanted), controller_of(existing)
    if mine is None or theirs is None or theirs.get("uid") == mine.get("uid"):
        return None
    return theirs
