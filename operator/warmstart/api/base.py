"""Shared model plumbing: camelCase aliases, Kubernetes-style conditions and object references."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from warmstart.api import API_VERSION


def api_config(*rules: dict[str, str]) -> ConfigDict:
    """The model config of every API model, with optional CEL rules (`x-kubernetes-validations`) on the object."""
    config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=False)
    if rules:
        config["json_schema_extra"] = {"x-kubernetes-validations": [dict(rule) for rule in rules]}
    return config


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, snake_case in Python, unknown fields ignored."""

    model_config = api_config()

    def to_api(self) -> dict[str, Any]:
        """The object as the API server stores it: aliases, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A metav1.Condition: one aspect of the object's state, with why and since when."""

    type: str = Field(description="Type of the condition, in CamelCase (Ready, WeightsCacheReady, ...).")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why the condition has this status.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str | None = Field(default=None, description="When the status last flipped (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation this condition was computed from."
    )


class ParentReference(ApiModel):
    """An endpoint (InferenceEndpointConfig or JumpStartModel) that uses a shared cache."""

    api_version: str = Field(default=API_VERSION, description="API version of the parent.")
    kind: str = Field(description="Kind of the parent.")
    name: str = Field(description="Name of the parent, in the cache's namespace.")
    uid: str = Field(description="UID of the parent; the key of this list.")


class SecretKeyRef(ApiModel):
    """A key in a Secret in the same namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(default="token", min_length=1, max_length=253, description="Key inside the Secret.")
    optional: bool | None = Field(
        default=None, description="Proceed without it (anonymously) when the Secret or key is missing."
    )


def conditions_schema_extra(schema: dict[str, Any]) -> None:
    """Mark a conditions list as a map keyed by type, as metav1 does."""
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = ["type"]
