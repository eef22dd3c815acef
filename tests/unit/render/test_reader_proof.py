"""Through the CSI driver, a node another namespace's cache filled counts for a cache only after its own preload.

A public or trust-group key is shared: the node's ready label says the bytes are there, not that this namespace may
read them or that they are its source's. With cache access `csi` the operator runs the cache's own preload Job on
such a node (`--if-missing --admit-reader`: it HEADs every file with the namespace's credentials and compares the
fingerprints), and the CSI driver mounts the key only where it recorded that Job's proof of the content the key holds
now; a proof of content the node no longer holds (the node's content annotation of the key) is made again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from test_weights_plans import KEY, NOW, node, spec

from warmstart.api import nodelabels, preloading
from warmstart.api.caches import ModelDataCacheConfigStatus, NodeCacheStatus
from warmstart.api.states import NodeCacheState
from warmstart.render import jobs
from warmstart.render import weights_plans as planning
from warmstart.render.context import RenderContext
from warmstart.render.weights_observations import JobPhase, PreloadJob, PreloadResult


def plan(
    prove: bool, status: ModelDataCacheConfigStatus | None = None, content: str = "", **observed: Any
) -> planning.Plan:
    """One reconcile with node `a` labelled ready, and `content` its content annotation of the key."""
    ready = node("a", ready=True)
    if content:
        ready = dataclasses.replace(ready, annotations={nodelabels.weights_content_annotation(KEY): content})
    found = planning.Observed(
        generation=1,
        key=KEY,
        spec=spec(),
        status=status or ModelDataCacheConfigStatus(),
        nodes=[ready],
        jobs=observed.pop("jobs", []),
        results=observed.pop("results", {}),
        retryable_reasons=frozenset(),
        prove_each_reader=prove,
    )
    return planning.plan(found, NOW)


def entry(result: planning.Plan) -> NodeCacheStatus:
    (found,) = result.status.nodes or []
    return found


def test_a_node_another_cache_filled_gets_this_caches_own_preload_before_it_counts() -> None:
    shared = plan(prove=True)
    assert shared.create == [("a", 1)]
    assert entry(shared).state == NodeCacheState.PENDING
    # the hostPath access proves access in each model pod's own init container: the label is enough there
    assert plan(prove=False).create == []
    assert entry(plan(prove=False)).reason == "Labelled"


def test_its_own_succeeded_preload_makes_the_node_ready_for_good() -> None:
    done = PreloadJob(name="preload-a-1", node="a", attempt=1, generation=1, uid="u", phase=JobPhase.SUCCEEDED)
    result = PreloadResult("AlreadyPresent", "complete; access and fingerprints re-checked", 10, 0.2)
    first = plan(prove=True, jobs=[done], results={done.name: result})
    assert first.create == [] and entry(first).state == NodeCacheState.READY
    assert entry(first).reason == "AlreadyPresent"
    # the Job is gone (TTL): the recorded result keeps the node ready, no new Job
    later = plan(prove=True, status=first.status)
    assert later.create == [] and entry(later).state == NodeCacheState.READY


def test_a_refused_proof_leaves_the_node_failed_for_this_cache() -> None:
    failed = PreloadJob(
        name="preload-a-1", node="a", attempt=1, generation=1, uid="u", phase=JobPhase.FAILED, failure_reason="Failed"
    )
    denied = PreloadResult("AccessDenied", "403 on HEAD of every file", None, 0.1)
    result = plan(prove=True, jobs=[failed], results={failed.name: denied})
    assert result.create == []
    assert (entry(result).state, entry(result).reason) == (NodeCacheState.FAILED, "AccessDenied")


def test_the_csi_preload_job_records_its_namespace_as_a_reader_and_the_hostpath_one_does_not() -> None:
    request = jobs.PreloadRequest(owner=jobs.Owner("w", "team-b", "uid"), key=KEY, node="a", attempt=1, generation=1)
    for access, expected in (("csi", True), ("hostPath", False)):
        ctx = RenderContext(operator_image="warmstart:test", cache_access=access, job_signing_key="k" * 32)
        job = jobs.preload_job(request, spec(hostPath="/opt/dlami/nvme"), ctx, ())
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert ("--admit-reader" in args) is expected, access


def test_the_reader_mark_lives_under_the_cache_directory_outside_every_keys_tree() -> None:
    mark = preloading.reader_mark("/opt/dlami/nvme/", KEY, "team-b")
    assert mark == f"/opt/dlami/nvme/warmstart/readers/{KEY}/team-b"
    assert not mark.startswith(preloading.key_dir("/opt/dlami/nvme", KEY) + "/")  # no writer of the key reaches it


OLD, NEW = "a" * 64, "b" * 64


def test_a_proof_of_content_the_node_no_longer_holds_is_made_again_with_a_new_attempt() -> None:
    done = PreloadJob(name="preload-a-1", node="a", attempt=1, generation=1, uid="u", phase=JobPhase.SUCCEEDED)
    proved = PreloadResult("AlreadyPresent", "complete; access and fingerprints re-checked", 10, 0.2, OLD)
    first = plan(prove=True, jobs=[done], results={done.name: proved}, content=OLD)
    assert first.create == [] and entry(first).content_sha256 == OLD
    # another namespace of the key's scope published new content on the node: the driver no longer mounts the key for
    # this namespace, so its own preload proves its access to the new content (its Job long gone)
    later = plan(prove=True, status=first.status, content=NEW)
    assert later.create == [("a", 2)]
    assert "content on the node changed" in (entry(later).message or "")
    # once that proof names the new content, the node stays ready
    again = PreloadJob(name="preload-a-2", node="a", attempt=2, generation=1, uid="u2", phase=JobPhase.SUCCEEDED)
    reproved = PreloadResult("AlreadyPresent", "complete", 10, 0.2, NEW)
    settled = plan(prove=True, status=later.status, jobs=[again], results={again.name: reproved}, content=NEW)
    assert settled.create == [] and entry(settled).state == NodeCacheState.READY
    assert entry(settled).content_sha256 == NEW


def test_a_download_records_the_new_content_on_the_node_through_csi_only() -> None:
    done = PreloadJob(name="preload-a-1", node="a", attempt=1, generation=1, uid="u", phase=JobPhase.SUCCEEDED)
    downloaded = PreloadResult("Downloaded", "fetched", 10, 0.2, NEW)
    assert plan(prove=True, jobs=[done], results={done.name: downloaded}, content=OLD).content == {"a": NEW}
    assert plan(prove=False, jobs=[done], results={done.name: downloaded}).content == {}
    proved = PreloadResult("AlreadyPresent", "complete", 10, 0.2, NEW)
    assert plan(prove=True, jobs=[done], results={done.name: proved}).content == {}  # a proof changes no content


def test_the_termination_message_carries_the_manifest_it_proved_and_nothing_else_is_taken_for_one() -> None:
    body = '{"reason": "AlreadyPresent", "message": "ok", "manifestSha256": "%s"}'
    assert jobs.parse_termination_message(body % NEW) == PreloadResult("AlreadyPresent", "ok", None, None, NEW)
    parsed = jobs.parse_termination_message(body % "../not-a-digest")
    assert parsed is not None and parsed.manifest_sha256 == ""
