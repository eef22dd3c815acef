"""The child caches an endpoint needs: its ModelDataCacheConfig and ModelImageCache manifests."""

from __future__ import annotations

from typing import Any

from warmstart.api import API_VERSION
from warmstart.api.caches import MDCC_KIND, MIC_KIND
from warmstart.render import keys, labels, owners
from warmstart.render.context import RenderContext
from warmstart.render.endpoints import Endpoint, ObjectRef

Manifest = dict[str, Any]


def parent_field_manager(uid: str) -> str:
    """Each parent applies its reference with its own field manager, so references come and go without races."""
    return f"warmstart-parent-{uid}"


def _metadata(name: str, ref: ObjectRef, extra_labels: dict[str, str], with_owner: bool) -> Manifest:
    meta: Manifest = {"name": name, "namespace": ref.namespace, "labels": labels.managed(extra_labels)}
    if with_owner:
        # not a controller: garbage collection removes the cache only when every parent is gone
        meta["ownerReferences"] = [owners.owner_reference(ref.kind, ref.name, ref.uid, controller=False)]
    return meta


def weights_cache(endpoint: Endpoint, ctx: RenderContext, *, attached: bool = True) -> Manifest:
    """The MDCC for this endpoint's source; `attached=False` renders it without this endpoint's references."""
    key = endpoint.weights_key(ctx.cache_sharing_groups)
    name = keys.weights_cache_name(key)
    targeting = endpoint.targeting().to_api()
    spec: Manifest = {
        "modelSourceConfig": endpoint.source.to_api(),
        "hostPath": endpoint.host_path,
        **targeting,
    }
    if endpoint.weights_cache and endpoint.weights_cache.model_size_bytes is not None:
        spec["modelSizeBytes"] = endpoint.weights_cache.model_size_bytes
    if endpoint.kubernetes and endpoint.kubernetes.service_account_name:
        spec["serviceAccountName"] = endpoint.kubernetes.service_account_name
    if attached:
        spec["parentReferences"] = [endpoint.ref.parent().to_api()]
    return {
        "apiVersion": API_VERSION,
        "kind": MDCC_KIND,
        "metadata": _metadata(name, endpoint.ref, {labels.MDCC_LABEL: name}, attached),
        "spec": spec,
    }


def image_cache(endpoint: Endpoint, *, attached: bool = True) -> Manifest:
    """The MIC for this endpoint's image on its target nodes."""
    key = endpoint.image_key()
    name = keys.image_cache_name(key)
    spec: Manifest = {"image": endpoint.worker.image, **endpoint.targeting().to_api()}
    if endpoint.kubernetes and endpoint.kubernetes.image_pull_secrets:
        spec["imagePullSecrets"] = list(endpoint.kubernetes.image_pull_secrets)
    if attached:
        spec["parentReferences"] = [endpoint.ref.parent().to_api()]
    return {
        "apiVersion": API_VERSION,
        "kind": MIC_KIND,
        "metadata": _metadata(name, endpoint.ref, {labels.MIC_LABEL: name}, attached),
        "spec": spec,
    }


def detached(current: Manifest) -> Manifest:
    """An apply body that keeps a cache's spec but drops the caller's references (used to release a cache)."""
    spec = {k: v for k, v in current.get("spec", {}).items() if k != "parentReferences"}
    meta = current["metadata"]
    return {
        "apiVersion": current["apiVersion"],
        "kind": current["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": spec,
    }
