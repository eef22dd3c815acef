"""Owner references to warmstart's custom resources, built in one place.

Two kinds, and `controller` decides both flags:
- controller (`controller: true`, `blockOwnerDeletion: true`): the child is managed by this one owner (a model
  Deployment by its endpoint, a pre-pull DaemonSet by its image cache); a foreground deletion of the owner waits for it;
- plain (`controller: false`, `blockOwnerDeletion: false`): the child only dies with the owner (a preload Job with its
  cache, a shared cache with each of its endpoints) and stays free for other owners.
"""

from __future__ import annotations

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
