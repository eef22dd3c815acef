"""The Gateway API Inference Extension's InferencePool CRD in the local cluster: the manifest the chart installs with
`gatewayInference.installInferencePoolCRD` (warmstart.api.inferencepools), so endpoints in gateway mode get their pool.
"""

from __future__ import annotations

import time

from kubernetes import client

from warmstart.api import inferencepools

FIELD_MANAGER = "warmstart-localcluster"


def install(api: client.ApiClient, timeout: float = 60.0) -> None:
    """Apply the CRD (server-side, idempotent) and wait until the API server serves it."""
    crd = inferencepools.crd()
    name = crd["metadata"]["name"]
    extensions = client.ApiextensionsV1Api(api)
    extensions.patch_custom_resource_definition(
        name, crd, field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml"
    )
    deadline = time.monotonic() + timeout
    while True:
        found = extensions.read_custom_resource_definition(name)
        conditions = (found.status.conditions if found.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s")
        time.sleep(0.2)
