"""The CSI driver's decision: which pod may mount which cache, read-only or read-write (pure, no node, no API).

Every attacker-controlled input is tried: volume attributes naming another namespace's key, a writable mount asked
by a model pod, a pod naming the operator's Job as its owner, a forged or unsigned Job, a Job of another node.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from warmstart.api.sources import ModelSourceConfig
from warmstart.csi import decisions
from warmstart.render import jobs, keys, labels, signatures

ROOT = "/opt/dlami/nvme"
NODE = "gpu-1"
SIGNING_KEY = b"s3cret-signing-key"
S3 = {"modelSourceType": "s3", "s3Storage": {"bucketName": "bucket", "region": "us-west-2"}, "modelLocation": "m"}
HUB = {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": "org/model"}}


def mdcc(namespace: str, source: dict[str, Any], name: str = "weights-x", host_path: str = ROOT) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"modelSourceConfig": source, "hostPath": host_path},
    }


def key_of(namespace: str, source: dict[str, Any], groups: dict[str, list[str]] | None = None) -> str:
    return keys.weights_key_in(ModelSourceConfig.model_validate(source), ROOT, namespace, groups or {})


def context(namespace: str, key: str, access: str = "read", pod: str = "model-0") -> dict[str, str]:
    return {
        decisions.POD_NAME: pod,
        decisions.POD_NAMESPACE: namespace,
        decisions.POD_UID: f"uid-{pod}",
        decisions.SERVICE_ACCOUNT: "default",
        decisions.EPHEMERAL: "true",
        decisions.KEY_ATTRIBUTE: key,
        decisions.ACCESS_ATTRIBUTE: access,
    }


def read(namespace: str, key: str, bodies: list[dict[str, Any]], groups: dict[str, list[str]] | None = None) -> Any:
    volume = decisions.parse_volume(context(namespace, key), read_only=True)
    assert isinstance(volume, decisions.Volume)
    caches = decisions.caches_of(namespace, bodies, groups or {})
    return decisions.decide_read(volume, caches, [ROOT])


def test_a_pod_reads_its_own_namespaces_cache_read_only() -> None:
    key = key_of("team-a", S3)
    decision = read("team-a", key, [mdcc("team-a", S3)])
    assert decision.verdict == decisions.Verdict.MOUNT
    assert decision.path == f"{ROOT}/warmstart/keys/{key}/model"
    assert decision.read_only


def test_another_namespace_naming_the_key_is_denied() -> None:
    """The attack: team-b's pod names team-a's key; even an MDCC of the same source in team-b has another key."""
    key = key_of("team-a", S3)
    decision = read("team-b", key, [mdcc("team-a", S3), mdcc("team-b", S3)])
    assert decision.verdict == decisions.Verdict.DENIED
    assert "namespace team-b has no ModelDataCacheConfig with key" in decision.message


def test_a_trust_group_shares_credentialed_keys_and_nobody_else_does() -> None:
    groups = {"ml": ["team-a", "team-b"]}
    key = key_of("team-a", S3, groups)
    assert read("team-b", key, [mdcc("team-b", S3)], groups).verdict == decisions.Verdict.MOUNT
    assert read("team-c", key, [mdcc("team-c", S3)], groups).verdict == decisions.Verdict.DENIED


def test_a_public_key_is_read_by_any_namespace_that_caches_it() -> None:
    key = key_of("team-a", HUB)
    assert read("team-z", key, [mdcc("team-z", HUB)]).verdict == decisions.Verdict.MOUNT
    assert read("team-y", key, []).verdict == decisions.Verdict.DENIED  # no cache object of its own


def test_the_key_comes_from_the_spec_never_from_the_status() -> None:
    key = key_of("team-a", S3)
    forged = mdcc("team-b", S3)
    forged["status"] = {"key": key}
    assert read("team-b", key, [forged]).verdict == decisions.Verdict.DENIED


def test_a_cache_under_a_root_the_admin_did_not_allow_is_denied() -> None:
    source = ModelSourceConfig.model_validate(S3)
    key = keys.weights_key_in(source, "/etc", "team-a", {})
    decision = read("team-a", key, [mdcc("team-a", S3, host_path="/etc")])
    assert decision.verdict == decisions.Verdict.DENIED
    assert "not an allowed cache root" in decision.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({decisions.POD_NAMESPACE: ""}, "podInfoOnMount"),
        ({decisions.KEY_ATTRIBUTE: "../../etc"}, "must be a cache key"),
        ({decisions.ACCESS_ATTRIBUTE: "admin"}, "must be 'read' or 'write'"),
        ({decisions.EPHEMERAL: "false"}, "only inline ephemeral volumes"),
    ],
)
def test_bad_attributes_are_denied_with_the_reason(change: dict[str, str], message: str) -> None:
    decision = decisions.parse_volume({**context("team-a", "0" * 32), **change}, read_only=True)
    assert isinstance(decision, decisions.Decision)
    assert decision.verdict == decisions.Verdict.DENIED
    assert message in decision.message


def test_a_read_volume_that_is_not_read_only_is_denied() -> None:
    decision = decisions.parse_volume(context("team-a", "0" * 32), read_only=False)
    assert isinstance(decision, decisions.Decision)
    assert "read-only" in decision.message


# --- writers ---------------------------------------------------------------------------------------------------------

TEMPLATE = {
    "containers": [{"name": "preload", "image": "warmstart:0.1.0", "command": ["warmstart"]}],
    "volumes": [{"name": "cache", "csi": {"driver": "d", "volumeAttributes": {"access": "write"}}}],
    "restartPolicy": "Never",
}


def job(key: str, node: str = NODE, *, signed: bool = True, uid: str = "job-uid", name: str | None = None) -> Any:
    name = name or jobs.preload_job_name(key, node, 1)
    annotations = {}
    if signed:
        annotations[signatures.ANNOTATION] = signatures.sign(SIGNING_KEY, "team-a", name, uid, key, node)
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": uid,
            "labels": {labels.NODE_LABEL: node, jobs.ATTEMPT_LABEL: "1"},
            "annotations": annotations,
        },
        "spec": {"template": {"spec": copy.deepcopy(TEMPLATE)}},
    }


def pod_of(job_body: Any, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = job_body["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True}
    return {
        "metadata": {"name": "preload-pod", "uid": "uid-preload-pod", "ownerReferences": [owner]},
        "spec": {**copy.deepcopy(TEMPLATE), "serviceAccountName": "default", **(spec or {})},
    }


def write(key: str, writer: decisions.Writer, bodies: list[dict[str, Any]] | None = None) -> decisions.Decision:
    volume = decisions.parse_volume(context("team-a", key, "write", pod="preload-pod"), read_only=False)
    assert isinstance(volume, decisions.Volume)
    caches = decisions.caches_of("team-a", [mdcc("team-a", S3)] if bodies is None else bodies, {})
    return decisions.decide_write(volume, caches, [ROOT], NODE, writer, SIGNING_KEY)


def test_the_operators_signed_job_writes_its_keys_tree_and_nothing_else_of_the_node() -> None:
    key = key_of("team-a", S3)
    body = job(key)
    decision = write(key, decisions.Writer(pod=pod_of(body), job=body))
    assert decision.verdict == decisions.Verdict.MOUNT
    assert (decision.path, decision.read_only) == (f"{ROOT}/warmstart/keys/{key}", False)  # not warmstart/ itself
    assert decision.writer == decisions.WriterMount("team-a", "uid-preload-pod", key, ROOT, jobs.ROLE_PRELOAD)


def test_a_cleanup_job_writes_too() -> None:
    key = key_of("team-a", S3)
    body = job(key, name=jobs.cleanup_job_name(key, NODE))
    decision = write(key, decisions.Writer(pod=pod_of(body), job=body))
    assert decision.verdict == decisions.Verdict.MOUNT
    assert decision.writer is not None and decision.writer.role == jobs.ROLE_CLEANUP


def test_a_model_pod_asking_to_write_is_denied() -> None:
    key = key_of("team-a", S3)
    pod = {"metadata": {"name": "preload-pod", "uid": "uid-preload-pod"}, "spec": TEMPLATE}
    decision = write(key, decisions.Writer(pod=pod, job=None))
    assert decision.verdict == decisions.Verdict.DENIED
    assert "only the operator's preload and cleanup Jobs" in decision.message


def test_a_tenants_job_with_the_operators_name_but_no_signature_waits_then_a_forged_one_is_denied() -> None:
    key = key_of("team-a", S3)
    unsigned = job(key, signed=False)
    assert write(key, decisions.Writer(pod=pod_of(unsigned), job=unsigned)).verdict == decisions.Verdict.NOT_YET
    forged = job(key)
    forged["metadata"]["uid"] = "another-uid"  # the signature of the operator's Job copied onto a tenant's Job
    decision = write(key, decisions.Writer(pod=pod_of(forged), job=forged))
    assert decision.verdict == decisions.Verdict.DENIED
    assert "no valid operator signature" in decision.message


def test_a_pod_naming_the_operators_job_but_running_something_else_is_denied() -> None:
    key = key_of("team-a", S3)
    body = job(key)
    evil = pod_of(body, {"containers": [{"name": "preload", "image": "evil", "command": ["sh"]}]})
    decision = write(key, decisions.Writer(pod=evil, job=body))
    assert decision.verdict == decisions.Verdict.DENIED
    assert "containers differs" in decision.message


def test_the_job_of_another_node_or_another_key_is_denied() -> None:
    key = key_of("team-a", S3)
    elsewhere = job(key, node="gpu-2")
    assert write(key, decisions.Writer(pod=pod_of(elsewhere), job=elsewhere)).verdict == decisions.Verdict.DENIED
    other_key = key_of("team-a", {**S3, "modelLocation": "other"})
    other = job(other_key)
    assert write(key, decisions.Writer(pod=pod_of(other), job=other)).verdict == decisions.Verdict.DENIED


def test_a_writer_whose_namespace_lacks_the_cache_is_denied() -> None:
    key = key_of("team-a", S3)
    body = job(key)
    assert write(key, decisions.Writer(pod=pod_of(body), job=body), bodies=[]).verdict == decisions.Verdict.DENIED


def test_signatures_bind_every_field() -> None:
    base = ("ns", "job", "uid", "k" * 32, "node")
    signature = signatures.sign(SIGNING_KEY, *base)
    assert signatures.valid(SIGNING_KEY, signature, *base)
    for i in range(len(base)):
        changed = list(base)
        changed[i] = changed[i] + "x"
        assert not signatures.valid(SIGNING_KEY, signature, *changed)
    assert not signatures.valid(b"", signature, *base)
    assert not signatures.valid(b"other", signature, *base)
