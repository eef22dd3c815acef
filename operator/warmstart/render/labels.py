"""The label keys warmstart puts on the children it creates, and the labels every child carries.

The keys of labels and annotations on nodes are part of the API: see `warmstart.api.nodelabels`.
"""

from __future__ import annotations

from warmstart.api import GROUP

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "warmstart"
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"

#: labels on children
MDCC_LABEL = f"{GROUP}/model-data-cache"
MIC_LABEL = f"{GROUP}/model-image-cache"
NODE_LABEL = f"{GROUP}/node"
ENDPOINT_LABEL = f"{GROUP}/endpoint"
ENDPOINT_KIND_LABEL = f"{GROUP}/endpoint-kind"
ROLE_LABEL = f"{GROUP}/role"


def managed(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels every child carries."""
    return {MANAGED_BY: MANAGER, PART_OF: "warmstart", **(extra or {})}
