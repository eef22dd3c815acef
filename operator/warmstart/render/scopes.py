"""Who may share a weights cache: the access scope of a source, which the cache key includes.

A cache is shared (one set of files on a node, one node label) by every endpoint whose key is equal. The key includes
an access scope, so sharing never crosses a trust boundary (docs/security-caches.md):

- `public`: the source needs no credentials of the tenant (a Hugging Face model without a token Secret). Anyone could
  download it, so every namespace may share it.
- `namespace:<ns>`: the source needs the tenant's credentials (S3 and FSx: the pod's IAM identity), or it is a
  namespaced object (a PVC, a token Secret). Only that namespace shares it.
- `group:<name>`: the namespace is in a group that the cluster admin declared mutually trusting (Helm value
  `weightsCache.sharedNamespaceGroups`); credentialed sources are shared inside the group. A group never widens a
  PVC source: a PVC name means a different volume in each namespace.

Pure: the namespace comes from the cache object's own metadata, never from its spec, so a tenant cannot name
another namespace's scope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from warmstart.api.sources import ModelSourceConfig, ModelSourceType

PUBLIC = "public"


def needs_credentials(source: ModelSourceConfig) -> bool:
    """Whether reading the source depends on who reads it (credentials, or a namespaced object)."""
    if source.model_source_type == ModelSourceType.HUGGINGFACE:
        hf = source.hugging_face_model
        return bool(hf and hf.token_secret_ref)
    return True  # S3 and FSx: the pod's IAM identity and network; kubernetesVolume: a namespaced PVC


def group_of(namespace: str, groups: Mapping[str, Sequence[str]]) -> str | None:
    """The trust group that names `namespace`, if any (settings guarantee at most one)."""
    for name, members in sorted(groups.items()):
        if namespace in members:
            return name
    return None


def access_scope(source: ModelSourceConfig, namespace: str, groups: Mapping[str, Sequence[str]]) -> str:
    """The scope that goes into the key of `source` cached for an endpoint in `namespace`."""
    if not needs_credentials(source):
        return PUBLIC
    group = group_of(namespace, groups)
    if group is not None and source.model_source_type != ModelSourceType.KUBERNETES_VOLUME:
        return f"group:{group}"
    return f"namespace:{namespace}"
