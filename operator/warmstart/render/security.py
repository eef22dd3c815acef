"""Container security contexts, in one place so every container that does the same job gets the same rights."""

from __future__ import annotations

from typing import Any

#: Writes into the node cache: the NVMe mount (/opt/dlami/nvme on HyperPod) is root-owned, so the writer runs as uid 0,
#: but with every capability dropped, no privilege escalation, a read-only root filesystem and the runtime's default
#: seccomp profile (set on the container: in a model pod, the pod-level context belongs to the model server).
CACHE_WRITER: dict[str, Any] = {
    "runAsUser": 0,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

#: Everything else warmstart runs: non-root, nothing to escalate, nothing to write outside its volumes.
RESTRICTED: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
