"""Cache roots are confined to the admin's list; cache pods tolerate only GPU pool taints and avoid control planes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from warmstart.api.caches import ModelDataCacheConfigSpec, ModelDataCacheConfigStatus
from warmstart.api.states import CacheState
from warmstart.controllers import settings
from warmstart.render import hostpaths, tolerations
from warmstart.render import weights_plans as planning

ROOTS = ("/opt/dlami/nvme", "/mnt/cache")


@pytest.mark.parametrize("path", ["/opt/dlami/nvme", "/opt/dlami/nvme/", "/opt//dlami/nvme", "/mnt/cache"])
def test_allowed_roots_pass_written_with_extra_slashes_too(path: str) -> None:
    assert hostpaths.refusal(path, ROOTS) is None


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/var/lib/kubelet",
        "/opt/dlami",
        "/opt/dlami/nvme-other",
        "/opt/dlami/nvmex/warmstart",
        "/opt/dlami/nvme/team-a",
        # another cache's own directory: mounting <it>/warmstart would expose and let a tenant write that cache
        "/opt/dlami/nvme/warmstart/weights/0123456789abcdef0123456789abcdef",
    ],
)
def test_every_other_root_and_every_path_under_an_allowed_root_is_refused(path: str) -> None:
    message = hostpaths.refusal(path, ROOTS)
    assert message is not None
    assert path in message and "/opt/dlami/nvme, /mnt/cache" in message and "cache.allowedHostPaths" in message


@pytest.mark.parametrize("path", ["/opt/dlami/nvme/.", "/opt/dlami/nvme/x/..", "/opt/dlami/./nvme", "opt/dlami/nvme"])
def test_dot_segments_and_relative_paths_are_refused_even_when_they_normalize_to_a_root(path: str) -> None:
    message = hostpaths.refusal(path, ROOTS)
    assert message is not None and path in message


def test_a_refused_cache_fails_without_touching_a_node() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    status = hostpaths.refused_status(ModelDataCacheConfigStatus(), 3, "hostPath /etc is not allowed", now)
    assert status.state == CacheState.FAILED and not status.nodes
    (ready,) = status.conditions or []
    assert (ready.type, ready.status, ready.reason) == ("Ready", "False", hostpaths.REASON)


def test_cache_pods_tolerate_gpu_pool_taints_and_the_admins_extras_never_everything() -> None:
    extra = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
    found = tolerations.cache_tolerations([extra, extra])
    assert {"operator": "Exists"} not in found
    assert [t["key"] for t in found] == ["nvidia.com/gpu", "aws.amazon.com/neuron", "kwok.x-k8s.io/node"]
    assert all(t.get("key") for t in found), "a toleration without a key tolerates every taint"


class _Node:
    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels, self.annotations = name, labels, {}


def test_a_cache_without_targeting_never_targets_a_control_plane_node() -> None:
    spec = ModelDataCacheConfigSpec.model_validate(
        {
            "modelSourceConfig": {
                "modelSourceType": "s3",
                "s3Storage": {"bucketName": "example-bucket", "region": "us-west-2"},
                "modelLocation": "models/llama",
            }
        }
    )
    nodes = [
        _Node("gpu-0", {}),
        _Node("cp-0", {"node-role.kubernetes.io/control-plane": ""}),
        _Node("old-master", {"node-role.kubernetes.io/master": ""}),
    ]
    assert [n.name for n in planning.target_nodes(spec, nodes)] == ["gpu-0"]


def test_required_affinity_keeps_every_term_off_control_planes() -> None:
    required: dict[str, Any] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
        ]
    }
    guarded = tolerations.exclude_control_plane(required)
    for term in guarded["nodeSelectorTerms"]:
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"} in term["matchExpressions"]
    assert guarded["nodeSelectorTerms"][1]["matchFields"] == required["nodeSelectorTerms"][1]["matchFields"]
    assert tolerations.exclude_control_plane(None)["nodeSelectorTerms"][0]["matchExpressions"]


def test_settings_read_roots_and_tolerations_from_the_environment() -> None:
    read = settings.from_env(
        {
            "WARMSTART_ALLOWED_HOST_PATHS": '["/mnt/a","/mnt/b"]',
            "WARMSTART_EXTRA_TOLERATIONS": '[{"key":"x","operator":"Exists"}]',
        }
    )
    assert read.render.allowed_host_paths == ("/mnt/a", "/mnt/b")
    assert read.render.extra_tolerations == ({"key": "x", "operator": "Exists"},)
    assert settings.from_env({}).render.allowed_host_paths == ("/opt/dlami/nvme",)


def test_a_node_is_schedulable_only_when_every_blocking_taint_is_tolerated() -> None:
    gpu = tolerations.cache_tolerations([])
    assert tolerations.schedulable([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], gpu)
    assert not tolerations.schedulable([{"key": "example.com/team", "value": "a", "effect": "NoSchedule"}], gpu)
    assert not tolerations.schedulable([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}], gpu)
    assert tolerations.schedulable([{"key": "example.com/soft", "effect": "PreferNoSchedule"}], gpu)
    assert tolerations.schedulable([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], gpu)
    extra = [{"key": "example.com/team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    assert tolerations.schedulable(
        [{"key": "example.com/team", "value": "a", "effect": "NoSchedule"}], tolerations.cache_tolerations(extra)
    )
    assert not tolerations.schedulable([{"key": "example.com/team", "value": "b", "effect": "NoSchedule"}], extra)
