"""The Gateway API Inference Extension's InferencePool CRD (`inference.networking.k8s.io/v1`), for clusters without it.

Gateway installs that support InferencePools usually bring this CRD; the chart installs it only when asked
(`gatewayInference.installInferencePoolCRD`), and the local cluster and tests install it. It is written here from the
documented v1 API fields (spec.selector.matchLabels, one targetPort, endpointPickerRef with failureMode, and
status.parents), not copied from upstream, and generated into charts/warmstart/files/ by `make crds`.
"""

from __future__ import annotations

from typing import Any

from warmstart.api.gateways import INFERENCE_POOL_GROUP, INFERENCE_POOL_KIND, INFERENCE_POOL_PLURAL, FailureMode

#: where the chart keeps it (a template includes it when asked): not in crds/, which Helm installs unconditionally
CHART_FILE = f"files/{INFERENCE_POOL_GROUP}_{INFERENCE_POOL_PLURAL}.yaml"

#: the Gateway API Inference Extension's API review, which the upstream CRD names too
API_APPROVAL = "https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/1173"
_DNS_SUBDOMAIN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_KIND = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
_NAMESPACE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


def _port(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["number"],
        "properties": {
            "number": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535, "description": "Port."}
        },
    }


def _string(description: str, **rules: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **rules}


_CONDITION: dict[str, Any] = {
    "type": "object",
    "description": "A metav1.Condition.",
    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
    "properties": {
        "type": _string("Condition type (Accepted, ResolvedRefs, ...).", maxLength=316),
        "status": _string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
        "reason": _string("CamelCase reason.", maxLength=1024, minLength=1),
        "message": _string("Human-readable detail.", maxLength=32768),
        "lastTransitionTime": _string("When the status last changed.", format="date-time"),
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    },
}

_SPEC: dict[str, Any] = {
    "type": "object",
    "description": "The model server pods of the pool and the endpoint picker that chooses among them.",
    "required": ["selector", "targetPorts", "endpointPickerRef"],
    "properties": {
        "selector": {
            "type": "object",
            "description": "Pods of the pool, by labels, in the pool's namespace.",
            "required": ["matchLabels"],
            "properties": {
                "matchLabels": {
                    "type": "object",
                    "description": "Every label a member pod carries.",
                    "maxProperties": 64,
                    "additionalProperties": _string("Label value.", maxLength=63, pattern=_LABEL_VALUE),
                }
            },
        },
        "targetPorts": {
            "type": "array",
            "description": "The port of the model servers (one).",
            "minItems": 1,
            "maxItems": 1,
            "x-kubernetes-list-type": "atomic",
            "items": _port("A port of the member pods."),
        },
        "endpointPickerRef": {
            "type": "object",
            "description": "The endpoint picker extension the gateway asks which pod serves each request.",
            "required": ["name"],
            "x-kubernetes-validations": [
                {
                    "rule": "self.kind != 'Service' || has(self.port)",
                    "message": "port is required when kind is 'Service'",
                }
            ],
            "properties": {
                "group": _string(
                    "API group of the referent; empty: core.", default="", maxLength=253, pattern=_DNS_SUBDOMAIN
                ),
                "kind": _string("Kind of the referent.", default="Service", minLength=1, maxLength=63, pattern=_KIND),
                "name": _string("Name of the referent.", minLength=1, maxLength=253),
                "port": _port("The Service port of the picker (not its target port)."),
                "failureMode": _string(
                    "What the gateway does while the picker does not answer.",
                    default=FailureMode.FAIL_CLOSE.value,
                    enum=[m.value for m in FailureMode],
                ),
            },
        },
    },
}

_STATUS: dict[str, Any] = {
    "type": "object",
    "description": "What the gateways using the pool report.",
    "properties": {
        "parents": {
            "type": "array",
            "maxItems": 32,
            "x-kubernetes-list-type": "atomic",
            "items": {
                "type": "object",
                "required": ["parentRef"],
                "properties": {
                    "conditions": {
                        "type": "array",
                        "maxItems": 8,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": _CONDITION,
                    },
                    "parentRef": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "group": _string(
                                "API group of the parent.",
                                default="gateway.networking.k8s.io",
                                maxLength=253,
                                pattern=_DNS_SUBDOMAIN,
                            ),
                            "kind": _string("Kind of the parent.", default="Gateway", maxLength=63, pattern=_KIND),
                            "name": _string("Name of the parent.", minLength=1, maxLength=253),
                            "namespace": _string("Namespace of the parent.", maxLength=63, pattern=_NAMESPACE),
                        },
                    },
                },
            },
        }
    },
}


def crd() -> dict[str, Any]:
    """The InferencePool CustomResourceDefinition (v1 served and stored, with the status subresource). Kept on
    `helm uninstall`: pools other tools made would go with it."""
    schema = {
        "type": "object",
        "description": "A pool of model server pods and the endpoint picker that routes among them.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _SPEC,
            "status": _STATUS,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{INFERENCE_POOL_PLURAL}.{INFERENCE_POOL_GROUP}",
            "annotations": {
                # the API server requires it of a CRD in a *.k8s.io group: the upstream API's approval
                "api-approved.kubernetes.io": API_APPROVAL,
                "helm.sh/resource-policy": "keep",
            },
        },
        "spec": {
            "group": INFERENCE_POOL_GROUP,
            "names": {
                "kind": INFERENCE_POOL_KIND,
                "listKind": f"{INFERENCE_POOL_KIND}List",
                "plural": INFERENCE_POOL_PLURAL,
                "singular": INFERENCE_POOL_KIND.lower(),
                "shortNames": ["infpool"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
