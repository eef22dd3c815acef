"""Target-node matching (node selector plus required affinity terms) and the NVMe capacity check."""

from __future__ import annotations

from typing import Any

import pytest

from warmstart import placement
from warmstart.api.scheduling import NodeAffinity

G5 = {"node.kubernetes.io/instance-type": "ml.g5.24xlarge", "gpus": "4", "zone": "a"}


def affinity(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> NodeAffinity:
    node_terms = [{"matchExpressions": exprs} for exprs in terms]
    if fields is not None:
        node_terms.append({"matchFields": fields})
    return NodeAffinity.model_validate(
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}
    )


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (expr("node.kubernetes.io/instance-type", "In", "ml.g5.24xlarge", "ml.p5.48xlarge"), True),
        (expr("node.kubernetes.io/instance-type", "In", "ml.p5.48xlarge"), False),
        (expr("node.kubernetes.io/instance-type", "NotIn", "ml.p5.48xlarge"), True),
        (expr("node.kubernetes.io/instance-type", "NotIn", "ml.g5.24xlarge"), False),
        (expr("absent", "NotIn", "x"), True),
        (expr("zone", "Exists"), True),
        (expr("absent", "Exists"), False),
        (expr("absent", "DoesNotExist"), True),
        (expr("zone", "DoesNotExist"), False),
        (expr("gpus", "Gt", "2"), True),
        (expr("gpus", "Gt", "4"), False),
        (expr("gpus", "Lt", "8"), True),
        (expr("gpus", "Lt", "4"), False),
        (expr("zone", "Gt", "1"), False),
        (expr("absent", "Lt", "1"), False),
    ],
)
def test_each_operator(requirement: dict[str, Any], expected: bool) -> None:
    assert placement.node_matches(G5, "n1", node_affinity=affinity([requirement])) is expected


def test_requirements_in_a_term_are_anded_and_terms_ored() -> None:
    both = affinity([expr("zone", "In", "a"), expr("gpus", "Gt", "8")])
    assert not placement.node_matches(G5, "n1", node_affinity=both)
    either = affinity([expr("zone", "In", "b")], [expr("gpus", "Lt", "8")])
    assert placement.node_matches(G5, "n1", node_affinity=either)


def test_match_fields_select_by_node_name() -> None:
    pinned = affinity(fields=[expr("metadata.name", "In", "n1")])
    assert placement.node_matches(G5, "n1", node_affinity=pinned)
    assert not placement.node_matches(G5, "n2", node_affinity=pinned)


def test_node_selector_must_match_every_label_and_combines_with_affinity() -> None:
    assert placement.node_matches(G5, "n1", node_selector={"zone": "a", "gpus": "4"})
    assert not placement.node_matches(G5, "n1", node_selector={"zone": "a", "gpus": "8"})
    assert not placement.node_matches(
        G5, "n1", node_selector={"zone": "a"}, node_affinity=affinity([expr("zone", "In", "b")])
    )
    assert placement.node_matches(G5, "n1")


def test_instance_type_affinity_targets_those_types() -> None:
    wanted = placement.instance_type_affinity(["ml.g5.24xlarge"])
    assert placement.node_matches(G5, "n1", node_affinity=wanted)
    assert not placement.node_matches(
        {**G5, "node.kubernetes.io/instance-type": "ml.g5.xlarge"}, "n1", node_affinity=wanted
    )


def test_capacity_from_annotation_then_table_then_unknown() -> None:
    annotation = {"warmstart.io/nvme-capacity-bytes": "1000"}
    assert placement.nvme_capacity_bytes("ml.g5.24xlarge", annotation) == 1000
    assert placement.nvme_capacity_bytes("ml.g5.xlarge") == 250 * placement.GB
    assert placement.nvme_capacity_bytes("ml.unknown.xlarge") is None
    assert placement.nvme_capacity_bytes(None, {"warmstart.io/nvme-capacity-bytes": "lots"}) is None


def test_capacity_check_keeps_a_margin() -> None:
    gb = placement.GB
    fits = placement.check_capacity(100 * gb, 250 * gb)
    assert fits.fits and "fits" in fits.message
    tight = placement.check_capacity(249 * gb, 250 * gb)
    assert not tight.fits and tight.needed_bytes > 249 * gb and "does not fit" in tight.message
    big = placement.check_capacity(1000 * gb, 500 * gb)
    assert not big.fits and big.capacity_bytes == 500 * gb
    unknown = placement.check_capacity(10**15, None)
    assert unknown.fits and "unknown" in unknown.message
