"""The operator's signature on its own cache-writing Jobs, which the CSI driver checks before it mounts a cache rw.

Kubernetes does not authenticate owner references, labels or names: a tenant who may create Jobs can copy all of
them. What a tenant cannot copy is a keyed hash that needs the chart's signing key (a Secret in the operator's
namespace, given to the operator and the driver only), over the Job's namespace, name and **uid** (assigned by the API
server, so a signature never fits a recreated or forged Job), the cache key and the node.
"""

from __future__ import annotations

import hashlib
import hmac

from warmstart.api import GROUP

#: the annotation the operator writes on a cache-writing Job once the API server gave it a uid
ANNOTATION = f"{GROUP}/writer-signature"


def sign(signing_key: bytes, namespace: str, job: str, uid: str, key: str, node: str) -> str:
    """Hex HMAC-SHA256 of the Job's identity and what it may write (one cache key on one node)."""
    message = "\n".join((namespace, job, uid, key, node)).encode()
    return hmac.new(signing_key, message, hashlib.sha256).hexdigest()


def valid(signing_key: bytes, signature: str, namespace: str, job: str, uid: str, key: str, node: str) -> bool:
    """Whether `signature` is the operator's for this Job, key and node (constant-time comparison)."""
    if not signing_key or not signature:
        return False
    return hmac.compare_digest(sign(signing_key, namespace, job, uid, key, node), signature)
