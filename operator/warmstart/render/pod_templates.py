"""Whether a pod runs its template: what the CSI driver asks of a pod before it may write a cache, and what the
operator asks of a model pod before it trusts the result of its preload init container (pure).

A tenant can create a pod that names the operator's signed Job as its controller; such a pod may write only if it
runs exactly what the Job would run. The comparison tolerates what EKS's identity webhooks add to a pod at creation,
and nothing else: IRSA and EKS Pod Identity add their `AWS_*` credential variables, a projected service-account
token volume and its read-only mount. A sidecar, an init container, another variable (say `LD_PRELOAD` or
`AWS_ENDPOINT_URL_S3`), another volume or mount, or any other change makes the pod a stranger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: credential variables the EKS identity webhooks inject (they never replace a variable the template sets)
IDENTITY_ENV = frozenset(
    {
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_STS_REGIONAL_ENDPOINTS",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    }
)
#: pod fields compared as they are (the ServiceAccount admission names `default` where the template names none)
_PLAIN = ("ephemeralContainers", "serviceAccountName", "securityContext", "hostNetwork", "hostPID", "hostIPC")
_DEFAULTS = {"serviceAccountName": "default"}


def token_volume(volume: Mapping[str, Any]) -> bool:
    """A projected volume of service-account tokens only (what the identity webhooks add)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return (
        set(volume) == {"name", "projected"}
        and bool(sources)
        and all(set(s) == {"serviceAccountToken"} for s in sources)
    )


def service_account_volume(volume: Mapping[str, Any]) -> bool:
    """The volume the ServiceAccount admission adds to a pod that mounts its token: `kube-api-access-*`, projected
    from the token, the cluster's CA bundle and the pod's namespace, nothing else."""
    sources = (volume.get("projected") or {}).get("sources") or []
    kinds = [next(iter(s), "") for s in sources if isinstance(s, Mapping) and len(s) == 1]
    ca: Mapping[str, Any] = next((s["configMap"] for s in sources if isinstance(s, Mapping) and "configMap" in s), {})
    return (
        str(volume.get("name", "")).startswith("kube-api-access-")
        and set(volume) == {"name", "projected"}
        and sorted(kinds) == ["configMap", "downwardAPI", "serviceAccountToken"]
        and len(kinds) == len(sources)
        and ca.get("name") == "kube-root-ca.crt"
    )


def container_mismatch(pod: Mapping[str, Any], template: Mapping[str, Any], added_volumes: set[str]) -> bool:
    for field in (set(pod) | set(template)) - {"env", "volumeMounts"}:
        if pod.get(field) != template.get(field):
            return True
    template_env = list(template.get("env") or [])
    names = {e.get("name") for e in template_env}
    env = [e for e in pod.get("env") or [] if e.get("name") in names or e.get("name") not in IDENTITY_ENV]
    mounts = [
        m for m in pod.get("volumeMounts") or [] if not (m.get("name") in added_volumes and m.get("readOnly") is True)
    ]
    return env != template_env or mounts != list(template.get("volumeMounts") or [])


def _containers_mismatch(
    pods: Sequence[Mapping[str, Any]], templates: Sequence[Mapping[str, Any]], added: set[str]
) -> bool:
    if [c.get("name") for c in pods] != [c.get("name") for c in templates]:
        return True
    return any(container_mismatch(p, t, added) for p, t in zip(pods, templates, strict=True))


def mismatch(pod_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> str | None:
    """The first part of the pod that differs from the template (beyond the identity webhooks' additions), or None."""
    for field in _PLAIN:
        if pod_spec.get(field, _DEFAULTS.get(field)) != template_spec.get(field, _DEFAULTS.get(field)):
            return field
    if pod_spec.get("automountServiceAccountToken") != template_spec.get("automountServiceAccountToken"):
        return "automountServiceAccountToken"
    pod_volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    template_volumes = {v.get("name"): v for v in template_spec.get("volumes") or []}
    added = set(pod_volumes) - set(template_volumes)
    if any(pod_volumes.get(n) != v for n, v in template_volumes.items()) or not all(
        token_volume(pod_volumes[n]) for n in added
    ):
        return "volumes"
    for field in ("initContainers", "containers"):
        if _containers_mismatch(pod_spec.get(field) or [], template_spec.get(field) or [], {str(n) for n in added}):
            return field
    return None
