"""The node cache's manifest: its shape, and the identity that produced the files (a wire contract on disk).

The preloader writes `.warmstart-manifest.json` last into a cache directory and reads it back to decide whether the
cache is complete and whether it may hand the files to the pod asking (see docs/security-caches.md):

- A manifest that is not valid JSON of this shape is a corrupt cache: it is downloaded again, never trusted.
- `producer` records who downloaded the files: the namespace and service account of the preload pod (from the
  downward API, the env names below; the operator renders them into every preload container). A pod of another
  identity HEADs every file with its own credentials and compares each file's size and fingerprint (the extra keys
  of `ManifestFile`) before it uses the files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FORMAT_VERSION = 1

#: Env of every preload container: the pod's namespace and service account (downward API fieldRefs).
NAMESPACE_ENV = "WARMSTART_POD_NAMESPACE"
SERVICE_ACCOUNT_ENV = "WARMSTART_POD_SERVICE_ACCOUNT"
NAMESPACE_FIELD = "metadata.namespace"
SERVICE_ACCOUNT_FIELD = "spec.serviceAccountName"


class Identity(BaseModel):
    """Who a preload ran as: what decides its access to a source."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    namespace: str = Field(min_length=1, max_length=63)
    service_account: str = Field(min_length=1, max_length=253, alias="serviceAccount")

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.namespace, "serviceAccount": self.service_account}


def identity_from_env(env: Mapping[str, str]) -> Identity | None:
    """The running pod's identity from its environment; None when either part is missing (run by hand)."""
    namespace, account = env.get(NAMESPACE_ENV, "").strip(), env.get(SERVICE_ACCOUNT_ENV, "").strip()
    if not namespace or not account:
        return None
    return Identity(namespace=namespace, service_account=account)


class ManifestFile(BaseModel):
    """One file of the cache and the fingerprint it was verified against (etag, sha256, ... as extra keys)."""

    model_config = ConfigDict(extra="allow", strict=True)

    path: str = Field(min_length=1)
    size: int = Field(ge=0)


class CacheManifest(BaseModel):
    """The manifest of a complete cache directory."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    format_version: int = Field(alias="formatVersion", strict=True)
    key: str = Field(min_length=1)
    source: dict[str, Any] = Field(default_factory=dict)
    completed_at: str = Field(alias="completedAt")
    total_bytes: int = Field(alias="totalBytes", ge=0, strict=True)
    files: list[ManifestFile]
    producer: Identity | None = None


def parse(raw: Any) -> CacheManifest | None:
    """The manifest if `raw` (decoded JSON) has the right shape and version, else None: a corrupt cache."""
    try:
        manifest = CacheManifest.model_validate(raw)
    except (ValidationError, RecursionError):
        return None
    if manifest.format_version != FORMAT_VERSION or manifest.total_bytes != sum(f.size for f in manifest.files):
        return None
    return manifest
