"""Apply a cache-writing Job and sign it: the CSI driver mounts a cache read-write only for a Job the operator signed.

The signature covers the Job's uid, which exists only once the API server created the Job, so it is a second write:
a merge patch of one annotation. Until it lands the driver answers UNAVAILABLE and the kubelet retries the mount.
With cache access `hostPath` nothing is signed (the Jobs mount the cache directly).
"""

from __future__ import annotations

from typing import Any

from warmstart.controllers.storage import Store
from warmstart.render import cache_volumes, signatures
from warmstart.render.context import RenderContext


def apply_job(store: Store, manifest: dict[str, Any], key: str, node: str, ctx: RenderContext) -> dict[str, Any]:
    applied: dict[str, Any] = store.apply(manifest)
    if ctx.cache_access != cache_volumes.CacheAccess.CSI:
        return applied
    meta = applied["metadata"]
    signing_key = ctx.job_signing_key.get_secret_value().encode()
    signature = signatures.sign(signing_key, meta["namespace"], meta["name"], meta["uid"], key, node)
    if (meta.get("annotations") or {}).get(signatures.ANNOTATION) != signature:
        patch = {"metadata": {"annotations": {signatures.ANNOTATION: signature}}}
        store.merge_patch("batch/v1", "Job", meta["name"], patch, meta["namespace"])
    return applied
