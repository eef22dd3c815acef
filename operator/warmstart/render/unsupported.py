"""Name the fields an endpoint sets that warmstart accepts but does not act on, so a condition can say so."""

from __future__ import annotations

from typing import Any

from warmstart.api.endpoints import InferenceEndpointConfigSpec
from warmstart.api.jumpstart import JumpStartModelSpec
from warmstart.api.strategies import RoutingStrategy

#: top-level spec fields (by API name) that are accepted for compatibility only
_IGNORED = (
    "tlsConfig",
    "dataCapture",
    "pdSpec",
    "kvCacheSpec",
    "sageMakerEndpoint",
    "endpointName",
    "loadBalancer",
    "tags",
)


def _set(value: Any) -> bool:
    return value not in (None, {}, [], "")


def unsupported_fields(spec: InferenceEndpointConfigSpec | JumpStartModelSpec) -> list[str]:
    """Paths of set-but-unimplemented fields, in API spelling, e.g. ['spec.tlsConfig']."""
    data = spec.to_api()
    found = [f"spec.{name}" for name in _IGNORED if _set(data.get(name))]
    if data.get("metrics", {}).get("enabled"):
        found.append("spec.metrics")
    if data.get("modelSourceConfig", {}).get("prefetchEnabled"):
        found.append("spec.modelSourceConfig.prefetchEnabled")
    routing = spec.intelligent_routing_spec
    if routing and routing.enabled and routing.routing_strategy == RoutingStrategy.KVAWARE:
        found.append("spec.intelligentRoutingSpec.routingStrategy=kvaware (served as prefixaware)")
    if isinstance(spec, JumpStartModelSpec) and spec.model.model_hub_name:
        found.append("spec.model.modelHubName (the public hub is used)")
    return found
