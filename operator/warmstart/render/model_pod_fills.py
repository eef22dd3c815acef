"""Which node a model pod's own preload filled, read as the operator reads its Jobs' pods (pure).

With cache access `hostPath`, a model pod scheduled onto a cold node fills the node cache itself: its
`warmstart-preload` init container downloads the model before the model server starts, and its termination message
carries the result. The operator labels that node ready (so the next pod there is steered to it and counted warm)
only when both hold:

- the endpoint's Deployment, as the API server stores it, runs exactly the init container the operator renders for
  the endpoint (image, command, arguments with the cache key, environment, mounts, and the volumes behind those
  mounts), apart from the fields the API server fills in with their defaults: an edited Deployment is not trusted;
- the pod runs exactly that stored init container, on exactly those volumes, tolerating only the read-only token
  mounts that the ServiceAccount admission and EKS's identity webhooks add (render/pod_templates.py).

A result is then the real preload's, whoever created the pod: a pod that runs anything else, or mounts anything else
as the cache, is never read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from warmstart.api.preloading import Reason
from warmstart.render import pod_templates
from warmstart.render.jobs import parse_termination_message
from warmstart.render.preload_containers import Rendered

#: results that leave a complete cache on the node
FILLED = frozenset({str(Reason.DOWNLOADED), str(Reason.ALREADY_PRESENT)})
#: container fields the API server sets when a manifest leaves them out, with the values it sets
_CONTAINER_DEFAULTS: dict[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": {},
}
#: the mode the API server gives a Secret, ConfigMap, projected or downward API volume that names none
_DEFAULT_MODE = 420


@dataclasses.dataclass(frozen=True)
class Fill:
    """A node a model pod's preload left a complete cache on."""

    pod: str
    node: str
    reason: str
    bytes: int | None


def _named(items: Any, name: str) -> Mapping[str, Any] | None:
    return next((i for i in items or [] if isinstance(i, Mapping) and i.get("name") == name), None)


def _env_as_written(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    field = (entry.get("valueFrom") or {}).get("fieldRef")
    if isinstance(field, Mapping) and field.get("apiVersion") == "v1":
        return {
            **entry,
            "valueFrom": {**entry["valueFrom"], "fieldRef": {k: v for k, v in field.items() if k != "apiVersion"}},
        }
    return entry


def _container_as_written(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container without what the API server adds by default (and its image pull policy, which trusts nothing)."""
    found = {
        k: v
        for k, v in container.items()
        if k != "imagePullPolicy" and not (k in _CONTAINER_DEFAULTS and v == _CONTAINER_DEFAULTS[k])
    }
    if "env" in found:
        found["env"] = [_env_as_written(e) for e in found["env"] or []]
    return found


def _volume_as_written(volume: Mapping[str, Any]) -> dict[str, Any]:
    found = dict(volume)
    for kind in ("secret", "configMap", "projected", "downwardAPI"):
        source = found.get(kind)
        if isinstance(source, Mapping) and source.get("defaultMode") == _DEFAULT_MODE:
            found[kind] = {k: v for k, v in source.items() if k != "defaultMode"}
    host = found.get("hostPath")
    if isinstance(host, Mapping) and host.get("type") == "":
        found["hostPath"] = {k: v for k, v in host.items() if k != "type"}
    return found


def _mounted(container: Mapping[str, Any]) -> set[str]:
    return {str(m.get("name")) for m in container.get("volumeMounts") or [] if isinstance(m, Mapping)}


def template_runs_our_preload(template_spec: Mapping[str, Any], expected: Rendered) -> bool:
    """Whether the stored pod template's init container is `expected`'s, on its volumes, up to API defaults."""
    stored = _named(template_spec.get("initContainers"), str(expected.container.get("name")))
    if stored is None or _container_as_written(stored) != _container_as_written(expected.container):
        return False
    wanted = {str(v.get("name")): v for v in expected.volumes}
    for name in _mounted(expected.container):
        volume = _named(template_spec.get("volumes"), name)
        if volume is None or name not in wanted or _volume_as_written(volume) != _volume_as_written(wanted[name]):
            return False
    return True


def runs_template_preload(pod_spec: Mapping[str, Any], template_spec: Mapping[str, Any], name: str) -> bool:
    """Whether the pod's init container `name` is the template's, on the template's volumes (webhooks' additions
    tolerated)."""
    container, stored = _named(pod_spec.get("initContainers"), name), _named(template_spec.get("initContainers"), name)
    if container is None or stored is None:
        return False
    volumes = {str(v.get("name")): v for v in pod_spec.get("volumes") or [] if isinstance(v, Mapping)}
    template_volumes = {str(v.get("name")): v for v in template_spec.get("volumes") or [] if isinstance(v, Mapping)}
    added = {
        n
        for n, v in volumes.items()
        if n not in template_volumes and (pod_templates.token_volume(v) or pod_templates.service_account_volume(v))
    }
    if pod_templates.container_mismatch(container, stored, added):
        return False
    return all(volumes.get(n) == template_volumes.get(n) for n in _mounted(stored))


def fill_of(pod: Mapping[str, Any], template_spec: Mapping[str, Any], expected: Rendered) -> Fill | None:
    """The node the pod's preload filled, if the stored template runs `expected`, the pod runs that template's init
    container there, and it ended with a complete cache; else None."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    name = str(expected.container.get("name"))
    if not node or not template_runs_our_preload(template_spec, expected):
        return None
    if not runs_template_preload(spec, template_spec, name):
        return None
    status = _named((pod.get("status") or {}).get("initContainerStatuses"), name)
    terminated = ((status or {}).get("state") or {}).get("terminated") or {}
    if terminated.get("exitCode") != 0:
        return None
    result = parse_termination_message(str(terminated.get("message") or ""))
    if result is None or result.reason not in FILLED:
        return None
    pod_name = str((pod.get("metadata") or {}).get("name", ""))
    return Fill(pod=pod_name, node=str(node), reason=result.reason, bytes=result.bytes)
