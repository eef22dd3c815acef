"""Content keys: the hash that names a cache, so identical sources share one and a changed source gets a new one."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from warmstart.api.caches import NodeTargeting
from warmstart.api.sources import ModelSourceConfig

KEY_LENGTH = 12

#: fields that do not change which bytes land in the cache
_CONTENT_NEUTRAL = {"prefetchEnabled", "tokenSecretRef"}


def _digest(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:KEY_LENGTH]


def _content(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k not in _CONTENT_NEUTRAL}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


def weights_key(source: ModelSourceConfig, host_path: str) -> str:
    """The key of a weights cache: the canonical source spec plus the cache root."""
    return _digest({"source": _content(source.to_api()), "hostPath": host_path.rstrip("/") or "/"})


def image_key(image: str, targeting: NodeTargeting) -> str:
    """The key of an image cache: the image reference plus the node targeting."""
    return _digest({"image": image, "targeting": targeting.to_api()})


def weights_cache_name(key: str) -> str:
    return f"weights-{key}"


def image_cache_name(key: str) -> str:
    return f"image-{key}"
