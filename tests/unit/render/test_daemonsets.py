"""Pre-pull DaemonSet rendering: golden manifests, deterministic names and keys, and the shell-free pull trick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import golden
from warmstart.api.caches import ModelImageCacheSpec
from warmstart.placement import instance_type_affinity
from warmstart.render import daemonsets, keys, labels, priority
from warmstart.render.context import RenderContext

GOLDEN = Path(__file__).parent / "golden" / "daemonsets"
CONTEXT = RenderContext(operator_image="warmstart:test")
IMAGE = "vllm/vllm-openai:v0.9.1"


def check_golden(name: str, manifests: list[dict[str, Any]]) -> None:
    golden.check_manifests(GOLDEN, name, manifests)


def endpoint_spec(**changes: Any) -> ModelImageCacheSpec:
    """A MIC as the endpoint controller makes it: image, instance-type affinity, tolerate all taints."""
    doc: dict[str, Any] = {
        "image": IMAGE,
        "nodeAffinity": instance_type_affinity(["ml.g5.24xlarge"]).to_api(),
        "imagePullSecrets": ["regcred"],
        "podAnnotations": {"sim.warmstart.io/duration": "2s"},
        "parentReferences": [{"kind": "InferenceEndpointConfig", "name": "example-model", "uid": "1111"}],
        **changes,
    }
    return ModelImageCacheSpec.model_validate(doc)


def canonical(spec: ModelImageCacheSpec) -> tuple[daemonsets.Owner, str]:
    key = keys.image_key(spec.image, daemonsets.targeting_of(spec))
    return daemonsets.Owner(name=keys.image_cache_name(key), namespace="team-a", uid="mic-uid"), key


def test_endpoint_made_cache_renders_golden_daemonset() -> None:
    spec = endpoint_spec()
    owner, key = canonical(spec)
    check_golden("endpoint", [daemonsets.daemonset(owner, spec, key, CONTEXT)])


def test_user_made_cache_with_selector_and_no_tolerations_renders_golden_daemonset() -> None:
    spec = ModelImageCacheSpec.model_validate(
        {"image": "acme/nim-llm:1.0", "nodeSelector": {"pool": "gpu"}, "tolerateAllTaints": False}
    )
    owner = daemonsets.Owner(name="my-nim-cache", namespace="team-b", uid="u-2")
    key = daemonsets.cache_key(owner.name, spec)
    check_golden("user", [daemonsets.daemonset(owner, spec, key, CONTEXT)])


def test_priority_class_golden() -> None:
    check_golden("priority-class", [priority.priority_class()])


def test_names_and_key_are_deterministic_and_follow_the_endpoint_controllers_name() -> None:
    spec = endpoint_spec()
    owner, key = canonical(spec)
    assert daemonsets.cache_key(owner.name, spec) == key
    assert daemonsets.daemonset_name(owner.name) == f"prepull-{key}"
    first = daemonsets.daemonset(owner, spec, key, CONTEXT)
    assert first == daemonsets.daemonset(owner, endpoint_spec(), key, CONTEXT)
    # the name wins over the content: the endpoint controller's affinity uses the key in the name
    assert daemonsets.cache_key("image-0123456789ab", spec) == "0123456789ab"


def test_other_image_gets_other_key_and_daemonset() -> None:
    a, key_a = canonical(endpoint_spec())
    b, key_b = canonical(endpoint_spec(image="vllm/vllm-openai:v0.9.2"))
    assert key_a != key_b
    assert daemonsets.daemonset_name(a.name) != daemonsets.daemonset_name(b.name)


def test_long_names_stay_valid_label_values() -> None:
    name = "a" * 200 + ".example"
    value = daemonsets.mic_label_value(name)
    assert len(value) <= 63 and len(daemonsets.daemonset_name(name)) <= 63
    assert value == daemonsets.mic_label_value(name)
    assert value != daemonsets.mic_label_value("a" * 200 + ".other")


def test_target_image_runs_the_copied_static_binary_so_no_shell_is_needed() -> None:
    spec = endpoint_spec(image="distroless/static:nonroot")
    owner, key = canonical(spec)
    pod = daemonsets.daemonset(owner, spec, key, CONTEXT)["spec"]["template"]["spec"]
    copy, pull = pod["initContainers"]
    (idle,) = pod["containers"]
    assert copy["image"] == idle["image"] == CONTEXT.operator_image
    assert copy["command"] == [daemonsets.NOOP_BINARY, "cp", daemonsets.NOOP_BINARY, daemonsets.NOOP_COPY]
    assert pull["image"] == spec.image and pull["imagePullPolicy"] == "IfNotPresent"
    assert pull["command"] == [daemonsets.NOOP_COPY, "true"] and "args" not in pull
    assert pull["workingDir"] == daemonsets.NOOP_DIR
    every = [copy, pull, idle]
    assert not any("sh" in c["command"] or "/bin/sh" in c["command"] for c in every)
    for container in every:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"] == {"cpu": "1m", "memory": "8Mi"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0


def test_targeting_tolerations_secrets_priority_and_annotations() -> None:
    spec = endpoint_spec()
    owner, key = canonical(spec)
    ds = daemonsets.daemonset(owner, spec, key, CONTEXT)
    template = ds["spec"]["template"]
    pod = template["spec"]
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["ml.g5.24xlarge"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
    ]  # the GPU node-pool taints only, never every taint
    assert {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"} in (
        required["nodeSelectorTerms"][0]["matchExpressions"]
    )
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == CONTEXT.prepull_priority_class
    assert template["metadata"]["annotations"] == {"sim.warmstart.io/duration": "2s"}
    assert template["metadata"]["labels"][labels.MIC_LABEL] == owner.name
    assert template["metadata"]["labels"][daemonsets.IMAGE_KEY_LABEL] == key
    assert ds["spec"]["selector"]["matchLabels"] == {labels.MIC_LABEL: owner.name}
    (ref,) = ds["metadata"]["ownerReferences"]
    assert ref["controller"] is True and ref["uid"] == owner.uid and ref["kind"] == "ModelImageCache"
    # parents are the endpoint controller's business: nothing of them reaches the DaemonSet
    assert "1111" not in yaml.safe_dump(ds)


def test_no_tolerations_unless_asked() -> None:
    spec = endpoint_spec(tolerateAllTaints=False, imagePullSecrets=None, podAnnotations=None)
    owner, key = canonical(spec)
    ds = daemonsets.daemonset(owner, spec, key, CONTEXT)
    pod = ds["spec"]["template"]["spec"]
    assert "tolerations" not in pod and "imagePullSecrets" not in pod
    assert "annotations" not in ds["spec"]["template"]["metadata"]
