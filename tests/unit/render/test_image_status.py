"""Image cache status and node labels from DaemonSet counts and pre-pull pods: states, failures, digests, labels."""

from __future__ import annotations

from typing import Any

from warmstart.api.caches import ModelImageCacheSpec, ModelImageCacheStatus
from warmstart.api.states import CacheState
from warmstart.render import daemonsets, image_labels, image_status, labels
from warmstart.render.conditions import find
from warmstart.render.image_status import PrepullPod

SPEC = ModelImageCacheSpec(image="vllm/vllm-openai:v0.9.1")
KEY = "0123456789ab"
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"


def ds(target: int, ready: int, observed: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"desiredNumberScheduled": target, "numberReady": ready}
    if observed:
        status["observedGeneration"] = 1
    return {"status": status}


def pod(
    node: str,
    ready: bool = False,
    reason: str | None = None,
    mic: str = "image-a",
    namespace: str = "ns",
    key: str = KEY,
    **extra: Any,
) -> PrepullPod:
    errors = (image_status.ContainerError("pull", SPEC.image, reason, "failed to pull"),) if reason else ()
    return PrepullPod(
        name=f"p-{node}",
        namespace=namespace,
        mic=mic,
        key=key,
        node=node,
        ready=ready,
        deleting=False,
        errors=errors,
        **extra,
    )


def status(
    target: int,
    ready: int,
    pods: list[PrepullPod],
    previous: ModelImageCacheStatus | None = None,
    now: str = NOW,
    observed: bool = True,
) -> ModelImageCacheStatus:
    return image_status.image_status(SPEC, KEY, 2, ds(target, ready, observed), pods, previous, now)


def test_pending_until_the_daemonset_counts_nodes_then_no_targets() -> None:
    waiting = image_status.image_status(SPEC, KEY, 1, None, [], None, NOW)
    assert waiting.state == CacheState.PENDING and "DaemonSet" in (waiting.message or "")
    none = status(0, 0, [])
    assert none.state == CacheState.PENDING and "no node" in (none.message or "")
    assert find(none.conditions, "Ready").reason == "NoTargetNodes"  # type: ignore[union-attr]


def test_downloading_then_ready_with_counts_key_image_and_generation() -> None:
    pulling = status(4, 1, [pod("n0", True), pod("n1"), pod("n2"), pod("n3")])
    assert pulling.state == CacheState.DOWNLOADING and (pulling.ready_nodes, pulling.target_nodes) == (1, 4)
    done = status(4, 4, [pod(f"n{i}", True) for i in range(4)], previous=pulling, now=LATER)
    assert done.state == CacheState.READY and done.ready_nodes == done.target_nodes == 4
    assert (done.key, done.image, done.observed_generation) == (KEY, SPEC.image, 2)
    ready = find(done.conditions, "Ready")
    assert (
        ready is not None
        and ready.status == "True"
        and ready.reason == "AllNodesReady"
        and ready.last_transition_time == LATER
    )
    assert ready.observed_generation == 2


def test_unchanged_condition_keeps_its_transition_time() -> None:
    first = status(2, 2, [pod("n0", True), pod("n1", True)])
    again = status(2, 2, [pod("n0", True), pod("n1", True)], previous=first, now=LATER)
    assert again == first


def test_failed_when_every_node_reports_a_pull_error_with_image_and_node() -> None:
    failed = status(2, 0, [pod("n0", reason="ErrImagePull"), pod("n1", reason="ImagePullBackOff")])
    assert failed.state == CacheState.FAILED
    assert [(f.node, f.reason) for f in failed.failures or []] == [("n0", "ErrImagePull"), ("n1", "ImagePullBackOff")]
    assert all(SPEC.image in (f.message or "") for f in failed.failures or [])
    assert "ErrImagePull on n0" in (failed.message or "")
    condition = find(failed.conditions, "Ready")
    assert condition is not None and condition.status == "False" and condition.reason == "ImagePullFailed"


def test_partially_ready_when_the_rest_fail_and_downloading_while_some_still_pull() -> None:
    partial = status(3, 1, [pod("n0", True), pod("n1", reason="ErrImagePull"), pod("n2", reason="ErrImagePull")])
    assert partial.state == CacheState.PARTIALLY_READY
    still = status(3, 1, [pod("n0", True), pod("n1", reason="ErrImagePull"), pod("n2")])
    assert still.state == CacheState.DOWNLOADING and len(still.failures or []) == 1


def test_failures_are_capped_and_counted_in_the_message() -> None:
    pods = [pod(f"n{i:03d}", reason="ErrImagePull") for i in range(50)]
    failed = status(50, 0, pods)
    assert len(failed.failures or []) == image_status.MAX_FAILURES
    assert "and 47 more" in (failed.message or "")


def test_resolved_digest_from_image_id_and_mutable_tag_warning() -> None:
    digest = "sha256:" + "a" * 64
    other = "sha256:" + "b" * 64
    one = status(2, 2, [pod("n0", True, image_id=f"docker.io/vllm/vllm-openai@{digest}"), pod("n1", True)])
    assert one.resolved_digest == digest
    mixed = status(
        3,
        3,
        [
            pod("n0", True, image_id=f"x@{digest}"),
            pod("n1", True, image_id=f"x@{digest}"),
            pod("n2", True, image_id=f"x@{other}"),
        ],
    )
    assert mixed.resolved_digest == digest and "different digests" in (mixed.message or "")
    kept = status(2, 2, [pod("n0", True), pod("n1", True)], previous=one)
    assert kept.resolved_digest == digest
    assert image_status.digest_of(digest) == digest and image_status.digest_of("not-a-digest") is None


def kwok_failed_pod(reason: str = "ErrImagePull") -> dict[str, Any]:
    """A pre-pull pod as kwok's pod-image-pull-error stage leaves it (target-image init container failing)."""
    return {
        "metadata": {
            "name": "prepull-x-abc",
            "namespace": "ns",
            "labels": {labels.MIC_LABEL: "image-a", daemonsets.IMAGE_KEY_LABEL: KEY},
        },
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}
                        ]
                    }
                }
            },
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False"}],
            "initContainerStatuses": [
                {"name": "copy-noop", "image": "warmstart:test", "state": {"terminated": {"exitCode": 0}}},
                {
                    "name": "pull",
                    "image": SPEC.image,
                    "state": {
                        "waiting": {"reason": reason, "message": f'failed to pull and unpack image "{SPEC.image}"'}
                    },
                },
            ],
            "containerStatuses": [
                {"name": "idle", "image": "warmstart:test", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }


def test_pod_body_is_read_into_a_prepull_pod() -> None:
    parsed = image_status.prepull_pod(kwok_failed_pod())
    assert (parsed.mic, parsed.key, parsed.node, parsed.ready, parsed.warm) == ("image-a", KEY, "n7", False, False)
    assert [(e.container, e.reason) for e in parsed.errors] == [("pull", "ErrImagePull")]
    ready = kwok_failed_pod()
    ready["spec"]["nodeName"] = "n8"
    ready["status"] = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "initContainerStatuses": [
            {"name": "pull", "imageID": "repo@sha256:abc", "state": {"terminated": {"exitCode": 0}}}
        ],
    }
    parsed = image_status.prepull_pod(ready)
    assert parsed.warm and parsed.node == "n8" and parsed.image_id == "repo@sha256:abc" and not parsed.errors


def test_labels_follow_ready_pods_and_survive_a_restarting_pod() -> None:
    own = [pod("n0", True), pod("n1", False), pod("n2", True)]
    changes = image_labels.label_changes(KEY, {"n1", "n3"}, own, [], {"n0", "n1", "n2", "n3"})
    # n0, n2 Ready -> add; n1 has a pod (restarting) -> keep; n3 has none -> remove
    assert changes == {"n0": "ready", "n2": "ready", "n3": None}


def test_labels_leave_nodes_that_are_no_longer_targeted() -> None:
    changes = image_labels.label_changes(KEY, {"n0", "n1"}, [pod("n0", True), pod("n1", True)], [], {"n0"})
    assert changes == {"n1": None}


def test_a_mic_going_away_keeps_labels_that_another_mic_of_the_same_key_backs() -> None:
    other = [
        pod("n0", True, mic="image-a", namespace="other-ns"),
        pod("n1", True, mic="image-a", namespace="other-ns", key="ffffffffffff"),
    ]
    changes = image_labels.label_changes(KEY, {"n0", "n1", "n2"}, [], other, set())
    assert changes == {"n1": None, "n2": None}
