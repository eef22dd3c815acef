"""The model pods' dynamic resource claims: each name in `worker.resources.claims` gets a pod `resourceClaims` entry.

Kubernetes' dynamic resource allocation (resource.k8s.io) needs both halves: a container's `resources.claims[].name`
must name an entry of the pod's `spec.resourceClaims`, which says where the claim comes from. HyperPod's API has only
the container half, so warmstart renders the pod half: each name is a ResourceClaimTemplate of that name in the
endpoint's namespace (`resourceClaimTemplateName`), from which Kubernetes makes one ResourceClaim per pod, as
replicas of a Deployment need (a single ResourceClaim would be shared by every replica).
"""

from __future__ import annotations

from typing import Any

from warmstart.api.workers import Worker

#: the API group and version dynamic resource allocation is served under (GA since Kubernetes 1.34)
RESOURCE_API = "resource.k8s.io/v1"
#: the endpoint's reason when it asks for claims on an API server that does not serve RESOURCE_API
UNAVAILABLE_REASON = "ResourceClaimsUnavailable"


def names(worker: Worker) -> list[str]:
    """The claim names the worker container uses, in order, once each."""
    found = [str(claim.get("name", "")) for claim in worker.resources.claims or []]
    return list(dict.fromkeys(name for name in found if name))


def pod_claims(worker: Worker) -> list[dict[str, Any]]:
    """The pod's `spec.resourceClaims`: one per claim name, made from the ResourceClaimTemplate of that name."""
    return [{"name": name, "resourceClaimTemplateName": name} for name in names(worker)]


def unavailable_message(worker: Worker) -> str:
    return (
        f"worker.resources.claims ({', '.join(names(worker))}) needs dynamic resource allocation, and this API server"
        f" does not serve {RESOURCE_API} (Kubernetes 1.34 or newer, or the DynamicResourceAllocation feature gate)"
    )
