"""Start-up checks of the cluster: refuse to run beside AWS's inference operator; find PodMonitors and DRA.

AWS's HyperPod inference operator defines the same group and kinds (InferenceEndpointConfig, JumpStartModel). Two
controllers of one kind would fight over every endpoint, so warmstart starts only when those CRDs are its own: every
CRD warmstart generates carries the label `warmstart.io/crd-owner: warmstart` (api/crds.py), and the schema of every
warmstart version, labelled or older, has `modelCacheConfig`; AWS's CRDs have neither.
"""

from __future__ import annotations

import logging
from typing import Any

from warmstart.api import CRD_OWNER, CRD_OWNER_LABEL, GROUP, endpoints, jumpstart
from warmstart.controllers.settings import OperatorSettings
from warmstart.controllers.storage import Store
from warmstart.render import monitoring, resource_claims

log = logging.getLogger(__name__)

CRD_API = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"
#: the CRDs warmstart shares its names with
SHARED_CRDS = (f"{endpoints.PLURAL}.{GROUP}", f"{jumpstart.PLURAL}.{GROUP}")
#: exit status of `warmstart operator` when another operator owns the kinds
EXIT_FOREIGN_CRDS = 3


class ForeignCrds(Exception):
    """The endpoint CRDs in the cluster are not warmstart's (AWS's inference operator installed them)."""


#: the spec field every warmstart version of the endpoint kinds has, and AWS's do not
WARMSTART_FIELD = "modelCacheConfig"


def is_warmstarts(crd: dict[str, Any]) -> bool:
    """Whether a CRD is warmstart's: its owner label, or (a warmstart release before the label) its schema."""
    if (crd["metadata"].get("labels") or {}).get(CRD_OWNER_LABEL) == CRD_OWNER:
        return True
    for version in crd.get("spec", {}).get("versions") or []:
        spec = version.get("schema", {}).get("openAPIV3Schema", {}).get("properties", {}).get("spec", {})
        if WARMSTART_FIELD in (spec.get("properties") or {}):
            return True
    return False


def foreign_crds(store: Store) -> list[str]:
    """Names of the shared CRDs that exist and are not warmstart's."""
    found = []
    for name in SHARED_CRDS:
        crd = store.get(CRD_API, CRD_KIND, name)
        if crd is not None and not is_warmstarts(crd):
            found.append(name)
    return found


def message(names: list[str]) -> str:
    return (
        f"the CRDs {', '.join(names)} are installed but are not warmstart's (no label {CRD_OWNER_LABEL}={CRD_OWNER}):"
        " AWS's HyperPod inference operator owns these kinds in this cluster. warmstart does not run beside it, as"
        " both would reconcile the same endpoints. Uninstall AWS's inference operator and its CRDs, or run warmstart"
        " in another cluster (docs/coexistence.md)."
    )


def check(store: Store, settings: OperatorSettings) -> OperatorSettings:
    """The settings to run with (PodMonitors on where their CRD exists); ForeignCrds when AWS's CRDs are there."""
    names = foreign_crds(store)
    if names:
        raise ForeignCrds(message(names))
    pod_monitors = store.get(CRD_API, CRD_KIND, monitoring.CRD_NAME) is not None
    if pod_monitors:
        log.info("%s is installed: endpoints with metrics get a PodMonitor", monitoring.CRD_NAME)
    claims = store.serves(resource_claims.RESOURCE_API)
    if not claims:
        log.info(
            "%s is not served: endpoints that use worker.resources.claims are refused", resource_claims.RESOURCE_API
        )
    found = {"pod_monitors": pod_monitors, "resource_claims": claims}
    return settings.model_copy(update={"render": settings.render.model_copy(update=found)})
