"""The key an endpoint's router replicas authenticate their sync messages with: chosen once, then kept.

The renderer is pure, so the controller chooses the key: the one in the endpoint's own sync Secret
when there is one (read once per operator process, then remembered), else 32 fresh random bytes.
The key never appears in logs, events or status.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import MutableMapping
from typing import Any

from warmstart.controllers.storage import Store
from warmstart.render import owners, router
from warmstart.render.endpoints import Endpoint

_MEMO = "router_sync_keys"
#: the shortest key taken from an existing Secret (a fresh one is 64 hex characters)
MIN_KEY_CHARS = 32


def key(store: Store, memo: MutableMapping[str, Any], endpoint: Endpoint) -> str:
    """The endpoint's sync key ("" when it has no proxy router)."""
    if not endpoint.proxy_enabled:
        return ""
    known: dict[str, str] = memo.setdefault(_MEMO, {})
    uid = endpoint.ref.uid
    if uid not in known:
        known[uid] = _existing(store, endpoint) or secrets.token_hex(32)
    return known[uid]


def _existing(store: Store, endpoint: Endpoint) -> str | None:
    """The key in the endpoint's own sync Secret, if it has one that is long enough."""
    name = router.sync_secret_name(endpoint.ref.name)
    found = store.get("v1", "Secret", name, endpoint.ref.namespace)
    controller = owners.controller_of(found) if found is not None else None
    if found is None or controller is None or controller.get("uid") != endpoint.ref.uid:
        return None  # only a key this endpoint's own Secret holds is kept
    encoded = (found.get("data") or {}).get(router.SYNC_KEY)
    try:
        text = base64.b64decode(encoded or "", validate=True).decode("ascii").strip()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if len(text) >= MIN_KEY_CHARS else None
