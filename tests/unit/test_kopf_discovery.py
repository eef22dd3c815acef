"""`controllers/discovery.unresolved` reads kopf's private handler registries (kopf has no public API for "which
resources do my handlers need"): these tests fail when a kopf upgrade moves or empties them, instead of the
restart-on-incomplete-discovery fix silently finding nothing to wait for."""

from __future__ import annotations

from kopf._cogs.structs import references

from warmstart.controllers import discovery, running
from warmstart.controllers.settings import OperatorSettings

#: resources the operator's handlers must watch or index (a subset: enough that an empty read cannot pass; nodes are
#: read by the operator's own informer, controllers/node_watching.py, not by kopf)
EXPECTED = {"inferenceendpointconfigs", "jumpstartmodels", "modeldatacacheconfigs", "modelimagecaches", "jobs", "pods"}


def _name(selector: references.Selector) -> str:
    return str(selector.plural or selector.any_name)


def _resource(selector: references.Selector) -> references.Resource:
    return references.Resource(selector.group or "", selector.version or "v1", _name(selector), namespaced=True)


def test_nothing_resolved_names_every_resource_the_handlers_need() -> None:
    lacking = discovery.unresolved(running.registry(OperatorSettings()), references.Insights())
    assert {_name(selector) for selector in lacking} >= EXPECTED


def test_all_resolved_names_none_and_one_missing_names_exactly_it() -> None:
    registry = running.registry(OperatorSettings())
    selectors = discovery.unresolved(registry, references.Insights())
    insights = references.Insights()
    insights.watched_resources.update(_resource(s) for s in selectors)
    assert discovery.unresolved(registry, insights) == []
    jobs = next(s for s in selectors if _name(s) == "jobs")
    insights.watched_resources.discard(_resource(jobs))
    assert discovery.unresolved(registry, insights) == [jobs]
