"""The operator's start-up checks: AWS's CRDs of the same names stop it; the PodMonitor CRD turns PodMonitors on."""

from __future__ import annotations

from typing import Any

import pytest

from warmstart.api import CRD_OWNER, CRD_OWNER_LABEL, crds
from warmstart.controllers import coexistence
from warmstart.controllers.settings import OperatorSettings
from warmstart.render import monitoring, resource_claims


class Crds:
    """A store that holds only CRDs, by name."""

    def __init__(self, *found: dict[str, Any], served: tuple[str, ...] = ()) -> None:
        self.found = {c["metadata"]["name"]: c for c in found}
        self.served = served

    def serves(self, api_version: str) -> bool:
        return api_version in self.served

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert (api_version, kind) == (coexistence.CRD_API, coexistence.CRD_KIND)
        return self.found.get(name)


OURS = [crds.crd(kind) for kind in crds.KINDS]
AWS = {"metadata": {"name": coexistence.SHARED_CRDS[1], "labels": {"app.kubernetes.io/name": "hyperpod-inference"}}}


def test_every_generated_crd_carries_the_owner_label() -> None:
    assert all(c["metadata"]["labels"] == {CRD_OWNER_LABEL: CRD_OWNER} for c in OURS)


def test_our_crds_or_none_let_the_operator_start() -> None:
    for store in (Crds(*OURS), Crds()):
        assert coexistence.check(store, OperatorSettings()).render.pod_monitors is False  # type: ignore[arg-type]


def test_aws_crds_stop_the_operator_with_what_to_do() -> None:
    store = Crds(OURS[0], AWS)
    assert coexistence.foreign_crds(store) == [coexistence.SHARED_CRDS[1]]  # type: ignore[arg-type]
    with pytest.raises(coexistence.ForeignCrds, match="Uninstall AWS's inference operator"):
        coexistence.check(store, OperatorSettings())  # type: ignore[arg-type]


def test_crds_of_an_earlier_warmstart_without_the_label_are_ours() -> None:
    earlier = [{**c, "metadata": {"name": c["metadata"]["name"]}} for c in OURS]
    assert coexistence.foreign_crds(Crds(*earlier)) == []  # type: ignore[arg-type]


def test_the_pod_monitor_crd_turns_pod_monitors_on() -> None:
    store = Crds(*OURS, {"metadata": {"name": monitoring.CRD_NAME}})
    assert coexistence.check(store, OperatorSettings()).render.pod_monitors is True  # type: ignore[arg-type]


def test_dynamic_resource_allocation_is_on_only_where_the_api_server_serves_it() -> None:
    on = Crds(*OURS, served=(resource_claims.RESOURCE_API,))
    assert coexistence.check(on, OperatorSettings()).render.resource_claims is True  # type: ignore[arg-type]
    assert coexistence.check(Crds(*OURS), OperatorSettings()).render.resource_claims is False  # type: ignore[arg-type]
