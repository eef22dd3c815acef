"""Container security contexts, in one place so every container that does the same job gets the same rights.

docs/security.md says which Pod Security level each pod kind needs, and why.
"""

from __future__ import annotations

from typing import Any

#: the uid and gid that own the node cache `<hostPath>/warmstart` and run every warmstart container
CACHE_UID = 65532

#: Writes into the node cache (the preload Job, the model pods' init container): non-root, as the cache's owner, with
#: every capability dropped, no privilege escalation, a read-only root filesystem and the runtime's default seccomp
#: profile (set on the container: in a model pod, the pod-level context belongs to the model server). It can write
#: only what uid 65532 owns: the cache directory, which CACHE_OWNER hands to it.
CACHE_WRITER: dict[str, Any] = {
    "runAsUser": CACHE_UID,
    "runAsGroup": CACHE_UID,
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

#: Hands `<hostPath>/warmstart` to CACHE_UID: the NVMe mount on HyperPod is root-owned, so only root can create the
#: directory there, and only CAP_CHOWN can give it away. Runs in the operator's preload and cleanup Jobs only, never in
#: a model pod: root with CHOWN alone (no DAC_OVERRIDE, no FOWNER), nothing else, for one command.
CACHE_OWNER: dict[str, Any] = {
    "runAsUser": 0,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

#: Everything else warmstart runs: non-root, nothing to escalate, nothing to write outside its volumes.
RESTRICTED: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": CACHE_UID,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
