"""Preload and cleanup Job rendering (golden manifests) and reading Jobs and pods back."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

import golden
from warmstart.api import API_VERSION, preloading
from warmstart.api.caches import ModelDataCacheConfigSpec
from warmstart.placement import instance_type_affinity
from warmstart.render import jobs, keys, labels
from warmstart.render.context import RenderContext
from warmstart.render.weights_plans import JobPhase

GOLDEN = Path(__file__).parent / "golden" / "jobs"
CONTEXT = RenderContext(
    operator_image="warmstart:test",
    preload_env_names=("AWS_ACCESS_KEY_ID",),
    preload_endpoints={"AWS_ENDPOINT_URL_S3": "https://s3-mirror.internal"},
    preload_pod_annotations={"sim.warmstart.io/duration": "2s", "team": "operator"},
)
CODES = sorted(preloading.PERMANENT_EXIT_CODES.values())
NODE = "hyperpod-i-0123456789abcdef0"

SOURCES: dict[str, dict[str, Any]] = {
    "s3": {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
        "modelLocation": "models/llama",
    },
    "huggingface": {
        "modelSourceType": "huggingface",
        "huggingFaceModel": {
            "modelId": "meta-llama/Llama-3.1-8B-Instruct",
            "commitSHA": "0e9e39f249a16976918f6564b8830bc894c89659",
            "tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"},
        },
    },
    "fsx": {
        "modelSourceType": "fsx",
        "fsxStorage": {
            "fileSystemId": "fs-0123456789abcdef0",
            "dnsName": "fs-0123.fsx.us-west-2.amazonaws.com",
            "mountName": "abcdef",
        },
        "modelLocation": "models/llama",
    },
    "pvc": {
        "modelSourceType": "kubernetesVolume",
        "kubernetesVolume": {"claimName": "models"},
        "modelLocation": "llama",
    },
}


def check_golden(name: str, manifests: list[dict[str, Any]]) -> None:
    golden.check_manifests(GOLDEN, name, manifests)


def spec_for(source: str, **changes: Any) -> ModelDataCacheConfigSpec:
    doc: dict[str, Any] = {
        "modelSourceConfig": SOURCES[source],
        "nodeAffinity": instance_type_affinity(["ml.g5.24xlarge"]).to_api(),
        "serviceAccountName": "model-reader",
        "podAnnotations": {"team": "cache"},
        **changes,
    }
    return ModelDataCacheConfigSpec.model_validate(doc)


def owner_and_key(spec: ModelDataCacheConfigSpec) -> tuple[jobs.Owner, str]:
    key = keys.weights_key_in(spec.model_source_config, spec.host_path, "team-a", {})
    return jobs.Owner(name=keys.weights_cache_name(key), namespace="team-a", uid="mdcc-uid"), key


def render_preload(spec: ModelDataCacheConfigSpec, attempt: int = 1, expected: int | None = None) -> dict[str, Any]:
    owner, key = owner_and_key(spec)
    request = jobs.PreloadRequest(
        owner=owner, key=key, node=NODE, attempt=attempt, generation=3, expected_bytes=expected
    )
    return jobs.preload_job(request, spec, CONTEXT, CODES)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_preload_job_matches_golden(source: str) -> None:
    check_golden(
        f"preload-{source}", [render_preload(spec_for(source), expected=16_000_000_000 if source == "s3" else None)]
    )


def test_cleanup_job_matches_golden() -> None:
    spec = spec_for("s3", hostPath="/mnt/nvme0")
    owner, key = owner_and_key(spec)
    check_golden("cleanup-s3", [jobs.cleanup_job(owner, key, NODE, spec, CONTEXT)])


def test_names_are_deterministic_short_and_per_node_and_attempt() -> None:
    key = "0123456789ab"
    name = jobs.preload_job_name(key, NODE, 1)
    assert name == jobs.preload_job_name(key, NODE, 1)
    assert name != jobs.preload_job_name(key, NODE + "x", 1)
    assert name != jobs.preload_job_name(key, NODE, 2)
    assert len(jobs.preload_job_name(key, "n" * 253, 99)) <= 63
    assert len(jobs.cleanup_job_name(key, "n" * 253)) <= 63


def test_job_is_pinned_tolerant_restricted_and_owned() -> None:
    job = render_preload(spec_for("s3"))
    pod = job["spec"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    ]
    assert "nodeName" not in pod
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
    ]  # the GPU node-pool taints only, never every taint
    host_paths = [v["hostPath"] for v in pod["volumes"] if "hostPath" in v]
    assert host_paths == [{"path": "/opt/dlami/nvme", "type": "Directory"}]  # only its `warmstart` subPath is mounted
    owner = job["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ModelDataCacheConfig" and owner["controller"] is True
    assert job["metadata"]["labels"][labels.NODE_LABEL] == NODE
    container = pod["containers"][0]
    assert container["terminationMessagePolicy"] == "File"
    assert container["args"][container["args"].index("--termination-log") + 1] == "/dev/termination-log"


def test_spec_annotations_win_over_operator_annotations() -> None:
    annotations = render_preload(spec_for("s3"))["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"sim.warmstart.io/duration": "2s", "team": "cache"}


def test_tolerations_can_be_turned_off() -> None:
    pod = render_preload(spec_for("s3", tolerateAllTaints=False))["spec"]["template"]["spec"]
    assert "tolerations" not in pod


def job_body(conditions: list[dict[str, str]], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "preload-k-1",
            "uid": "job-uid",
            "labels": {labels.NODE_LABEL: "n1", labels.ROLE_LABEL: "preload", jobs.ATTEMPT_LABEL: "2"},
            "annotations": {jobs.GENERATION_ANNOTATION: "4"},
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": "ModelDataCacheConfig", "uid": "mdcc-uid", "controller": True}
            ],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"conditions": conditions, **status},
    }


def test_read_job_running_succeeded_failed() -> None:
    running = jobs.read_job(job_body([], active=1, ready=1))
    assert (running.role, running.owner_uid, running.job.node, running.job.attempt, running.job.generation) == (
        "preload",
        "mdcc-uid",
        "n1",
        2,
        4,
    )
    assert running.job.phase == JobPhase.RUNNING and running.job.active == 1
    done = jobs.read_job(
        job_body([{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}])
    )
    assert done.job.phase == JobPhase.SUCCEEDED and done.job.finished_at == dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.UTC)
    failed = jobs.read_job(
        job_body(
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "lastTransitionTime": "2026-01-01T00:02:00Z",
                }
            ]
        )
    )
    assert failed.job.phase == JobPhase.FAILED and failed.job.failure_reason == "BackoffLimitExceeded"


def pod(created: str, message: str, code: int = 0) -> dict[str, Any]:
    terminated = {"exitCode": code, "message": message}
    return {
        "metadata": {"creationTimestamp": created},
        "status": {"containerStatuses": [{"name": "preload", "state": {"terminated": terminated}}]},
    }


def test_read_result_takes_newest_pod_message_then_exit_code() -> None:
    message = json.dumps(
        {"outcome": "Failed", "reason": "NotFound", "message": "no such key", "bytes": 0, "seconds": 1.5}
    )
    pods = [pod("2026-01-01T00:00:00Z", "garbage", 66), pod("2026-01-01T00:01:00Z", message, 66)]
    found = jobs.read_result(pods, {66: "NotFound"})
    assert found is not None and (found.reason, found.message, found.seconds) == ("NotFound", "no such key", 1.5)
    by_code = jobs.read_result([pod("2026-01-01T00:00:00Z", "", 75)], {75: "NetworkError"})
    assert by_code is not None and by_code.reason == "NetworkError"
    assert jobs.read_result([pod("2026-01-01T00:00:00Z", "", 1)], {75: "NetworkError"}) is None


@pytest.mark.parametrize(
    "forged",
    [
        {"ownerReferences": None, "annotations": {jobs.OWNER_UID_ANNOTATION: "mdcc-uid"}},
        {"ownerReferences": [{"apiVersion": API_VERSION, "kind": "ModelDataCacheConfig", "uid": "mdcc-uid"}]},
        {
            "ownerReferences": [
                {"apiVersion": "x/v1", "kind": "ModelDataCacheConfig", "uid": "mdcc-uid", "controller": True}
            ]
        },
    ],
    ids=["annotation-only", "not-controller", "other-group"],
)
def test_a_preload_job_without_the_caches_controller_reference_belongs_to_no_cache(forged: dict[str, Any]) -> None:
    """Labels and annotations are anyone's to set: a tenant's Job with them must not count as the cache's."""
    body = job_body([{"type": "Complete", "status": "True"}])
    body["metadata"]["ownerReferences"] = forged["ownerReferences"]
    body["metadata"]["annotations"].update(forged.get("annotations", {}))
    assert jobs.read_job(body).owner_uid == ""


def _pod(uid: str, node: str, managers: list[tuple[str, str | None]]) -> dict[str, Any]:
    fields = [{"manager": m, "operation": "Update", **({"subresource": s} if s else {})} for m, s in managers]
    return {
        "metadata": {
            "name": f"p-{uid}-{node}",
            "ownerReferences": [{"kind": "Job", "uid": uid, "controller": True}],
            "managedFields": fields,
        },
        "spec": {"nodeName": node},
    }


def test_only_pods_the_job_controller_made_for_the_job_on_its_node_speak_for_it() -> None:
    job = jobs.read_job({"metadata": {"name": "j", "uid": "job-uid", "labels": {labels.NODE_LABEL: NODE}}}).job
    controller = [("kube-controller-manager", None), ("kubelet", "status"), ("kube-scheduler", "binding")]
    genuine = _pod("job-uid", NODE, controller)
    forged = [
        _pod("job-uid", NODE, [("kubectl-create", None)]),  # a tenant's pod with the Job's labels and owner
        _pod("job-uid", NODE, [*controller, ("kubectl-edit", None)]),  # edited by someone else afterwards
        _pod("other-uid", NODE, controller),  # controlled by another Job
        _pod("job-uid", "another-node", controller),  # ran elsewhere
    ]
    assert jobs.pods_of([genuine, *forged], job, "kube-controller-manager") == [genuine]


def test_a_job_records_who_wrote_it_status_writers_left_out() -> None:
    body = {
        "metadata": {
            "name": "j",
            "managedFields": [
                {"manager": "warmstart", "operation": "Apply"},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
            ],
        }
    }
    assert jobs.read_job(body).managers == frozenset({"warmstart"})
    assert jobs.made_by(body, "warmstart") and not jobs.made_by(body, "kubectl")
