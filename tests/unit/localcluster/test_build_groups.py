"""`warmstart cluster build --only GROUP`: the groups CI builds in turn cover every build, once, in build order."""

from __future__ import annotations

from warmstart.localcluster import cli, versions


def test_the_groups_together_are_every_build_exactly_once() -> None:
    grouped = [build for group in versions.GROUPS.values() for build in group]
    assert sorted(b.name for b in grouped) == sorted(b.name for b in versions.BUILDS)
    assert len(grouped) == len(set(grouped))


def test_only_names_the_groups_builds_in_build_order_and_none_means_all() -> None:
    assert cli._chosen(["autoscaling"]) == versions.AUTOSCALING
    assert cli._chosen(["real-nodes", "control-plane"]) == versions.CONTROL_PLANE + versions.REAL_NODES
    assert cli._chosen(None) == versions.BUILDS
