"""How a pod reaches the node's weights cache: the warmstart CSI driver's inline volume, or a hostPath.

- `csi` (Helm `cache.access: csi`): an inline ephemeral `csi:` volume of the warmstart driver naming the cache key.
  Pod Security `baseline` admits it, and the driver decides on the node, from the pod's own namespace and owner, what
  it mounts (warmstart/csi/decisions.py): a model pod gets `<root>/warmstart/keys/<key>/model` read-only; only the
  operator's signed preload and cleanup Jobs get their key's tree `<root>/warmstart/keys/<key>` read-write, created
  with the cache uid as owner. No pod carries a hostPath or a root step.
- `hostPath`: the admin's root as a hostPath (`type: Directory`: it must exist) with only its `warmstart` subPath
  mounted, which needs the namespace to be `privileged`, plus the `warmstart-cache-owner` root step
  (render/preload_containers.py).
"""

from __future__ import annotations

import enum
from typing import Any

from warmstart.api import GROUP

#: the CSI driver's name (the chart's CSIDriver object)
DRIVER = f"cache.warmstart.{GROUP}"
KEY_ATTRIBUTE = "key"
ACCESS_ATTRIBUTE = "access"
READ, WRITE = "read", "write"


class CacheAccess(str, enum.Enum):
    CSI = "csi"
    HOST_PATH = "hostPath"


def csi_volume(name: str, key: str, *, write: bool) -> dict[str, Any]:
    """The inline volume of cache `key`: read-only for a model pod, read-write (if the driver agrees) for a Job."""
    attributes = {KEY_ATTRIBUTE: key, ACCESS_ATTRIBUTE: WRITE if write else READ}
    return {"name": name, "csi": {"driver": DRIVER, "readOnly": not write, "volumeAttributes": attributes}}
