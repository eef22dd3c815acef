"""Node targeting: typed node selector terms and node affinity, as in the core Kubernetes API."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from warmstart.api.base import ApiModel


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(ApiModel):
    """One label requirement: key, operator and values."""

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: NodeSelectorOperator = Field(description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: list[str] | None = Field(
        default=None, description="Values for In/NotIn (one or more), Gt/Lt (exactly one)."
    )


class NodeSelectorTerm(ApiModel):
    """Requirements that must all hold (AND)."""

    match_expressions: list[NodeSelectorRequirement] | None = Field(default=None, description="Label requirements.")
    match_fields: list[NodeSelectorRequirement] | None = Field(
        default=None, description="Field requirements (metadata.name)."
    )


class NodeSelector(ApiModel):
    """Terms of which at least one must hold (OR)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(description="The terms, ORed.")


class PreferredSchedulingTerm(ApiModel):
    """A weighted preference."""

    weight: int = Field(ge=1, le=100, description="Weight 1-100.")
    preference: NodeSelectorTerm = Field(description="The preferred node term.")


class NodeAffinity(ApiModel):
    """Node affinity, as in a Pod spec."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes the model must run on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = Field(
        default=None, description="Nodes the model prefers."
    )
