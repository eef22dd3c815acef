"""Content keys: the hash that names a cache, so identical sources share one and a changed source gets a new one.

A key is KEY_LENGTH lowercase hex characters: 128 bits of SHA-256, so a deliberate collision between two different
inputs is out of reach, and `weights-<key>` still fits the 63-character name part of a label key. A weights key
covers the canonical source spec, the cache root and the access scope (render/scopes.py), so two namespaces share
files only where that is provably safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from warmstart.api.caches import NodeTargeting
from warmstart.api.sources import ModelSourceConfig
from warmstart.render import scopes

#: hex characters of a key: 32 x 4 = 128 bits
KEY_LENGTH = 32

#: fields that do not change which bytes land in the cache (the token Secret and the role are covered by the scope)
_CONTENT_NEUTRAL = {"prefetchEnabled", "tokenSecretRef", "roleArn"}


def _digest(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:KEY_LENGTH]


def _content(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k not in _CONTENT_NEUTRAL}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


def weights_key(source: ModelSourceConfig, host_path: str, scope: str) -> str:
    """The key of a weights cache: the canonical source spec, the cache root and the access scope."""
    return _digest({"source": _content(source.to_api()), "hostPath": host_path.rstrip("/") or "/", "scope": scope})


def source_key(source: ModelSourceConfig) -> str:
    """The key of what a cache downloads, whoever downloads it and into whichever root: the canonical source spec
    alone (the warm-up throttle counts preloads per source, across namespaces)."""
    return _digest({"source": _content(source.to_api())})


def weights_key_in(
    source: ModelSourceConfig, host_path: str, namespace: str, groups: Mapping[str, Sequence[str]]
) -> str:
    """The key of `source` cached for an endpoint (or cache object) in `namespace`."""
    return weights_key(source, host_path, scopes.access_scope(source, namespace, groups))


def image_key(image: str, targeting: NodeTargeting) -> str:
    """The key of an image cache: the image reference plus the node targeting."""
    return _digest({"image": image, "targeting": targeting.to_api()})


def weights_cache_name(key: str) -> str:
    return f"weights-{key}"


def image_cache_name(key: str) -> str:
    return f"image-{key}"
