"""Gateway mode: the router as a Gateway API Inference Extension endpoint picker (``endpointPicker``).

With ``intelligentRoutingSpec.endpointPicker`` set (and routing enabled), the operator renders an ``InferencePool``
(``inference.networking.k8s.io/v1``) that selects the model pods and names warmstart's endpoint picker, instead of the
proxy router. The user's own Gateway and HTTPRoute send traffic to that pool (docs/gateway.md).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from warmstart.api.base import ApiModel

#: the InferencePool API the operator renders (the Gateway API Inference Extension's GA version)
INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/v1"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_PLURAL = "inferencepools"


class FailureMode(StrEnum):
    """What the gateway does with a request when the endpoint picker does not answer."""

    FAIL_CLOSE = "FailClose"
    FAIL_OPEN = "FailOpen"


class EndpointPickerSpec(ApiModel):
    """warmstart extension: serve routing as a Gateway API Inference Extension endpoint picker behind the user's
    own gateway (an InferencePool plus the picker's pods) instead of warmstart's proxy router."""

    failure_mode: FailureMode = Field(
        default=FailureMode.FAIL_CLOSE,
        description="The InferencePool's endpointPickerRef.failureMode: FailClose (the gateway refuses requests while "
        "no picker answers) or FailOpen (it sends them to a model pod of its own choice).",
    )
