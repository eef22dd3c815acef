"""Operator settings are read from the environment once, at start-up, and configure the handlers they are given to."""

from __future__ import annotations

import json

import pytest

from warmstart.controllers import running, settings


def test_environment_is_read_into_settings() -> None:
    read = settings.from_env(
        {"WARMSTART_RESYNC_SECONDS": "3.5", "WARMSTART_PEERING": "warmstart", "WARMSTART_PEERING_PRIORITY": "7"}
    )
    assert read.resync_seconds == 3.5
    assert read.peering == "warmstart" and read.peering_priority == 7


def test_router_admin_peers_are_read_from_json() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    read = settings.from_env({"WARMSTART_ROUTER_ADMIN_FROM": json.dumps([peer])})
    assert read.render.router_admin_from == (peer,)
    assert settings.from_env({"WARMSTART_ROUTER_ADMIN_FROM": "[]"}).render.router_admin_from == ()


def test_router_trusted_proxies_are_read_from_json_and_checked_at_start_up() -> None:
    read = settings.from_env({"WARMSTART_ROUTER_TRUSTED_PROXIES": '["10.0.0.0/8", "fd00::1"]'})
    assert read.render.router_trusted_proxies == ("10.0.0.0/8", "fd00::1/128")
    assert settings.from_env({"WARMSTART_ROUTER_TRUSTED_PROXIES": "[]"}).render.router_trusted_proxies == ()
    with pytest.raises(ValueError, match=r"router\.trustedProxies"):
        settings.from_env({"WARMSTART_ROUTER_TRUSTED_PROXIES": '["10.0.0.1/8"]'})


def test_router_node_selector_is_read_from_json() -> None:
    read = settings.from_env({"WARMSTART_ROUTER_NODE_SELECTOR": '{"role": "cpu"}'})
    assert read.render.router_node_selector == {"role": "cpu"}


def test_router_replicas_come_from_the_chart_value_and_default_to_two() -> None:
    assert settings.from_env({"WARMSTART_ROUTER_REPLICAS": "3"}).render.router_replicas == 3
    assert settings.from_env({}).render.router_replicas == 2


def test_an_empty_environment_keeps_the_defaults() -> None:
    assert settings.from_env({}) == settings.OperatorSettings()


def test_peering_priority_is_the_configured_one_or_random() -> None:
    assert running.peering_priority(settings.OperatorSettings()) is None
    assert running.peering_priority(settings.OperatorSettings(peering="p", peering_priority=7)) == 7
    picked = {running.peering_priority(settings.OperatorSettings(peering="p")) for _ in range(5)}
    assert len(picked) > 1, "replicas without a configured priority must not all pick the same one"


def test_every_kind_has_one_status_loop_and_no_timer() -> None:
    registry = running.registry(settings.OperatorSettings(resync_seconds=3.5))
    # kopf has no public listing of a registry's handlers; the spawning registry holds the timers and daemons
    spawned = registry._spawning.get_all_handlers()
    assert [h for h in spawned if hasattr(h, "interval")] == [], "status follows events, not timers"
    # endpoints (both kinds), image caches, weights caches: each loop wakes on events, resync_seconds at the latest
    assert [h.id for h in spawned] == ["follow-status"] * 4


def test_in_a_pod_the_api_server_is_the_address_the_kubelet_gives_not_a_dns_name() -> None:
    fallback = "https://kubernetes.default.svc"
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert running.in_cluster_server(env, fallback) == "https://10.96.0.1:443"
    assert running.in_cluster_server({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, fallback) == "https://[fd00::1]:443"
    assert running.in_cluster_server({}, fallback) == fallback


def test_cache_sharing_groups_come_from_the_chart_value() -> None:
    read = settings.from_env({"WARMSTART_CACHE_SHARING_GROUPS": '{"ml": ["team-a", "team-b"]}'})
    assert read.render.cache_sharing_groups == {"ml": ["team-a", "team-b"]}
    assert settings.from_env({}).render.cache_sharing_groups == {}


def test_fleet_settings_come_from_the_chart_values() -> None:
    read = settings.from_env(
        {
            "WARMSTART_PRELOAD_CONCURRENCY_NODES": "8",
            "WARMSTART_PRELOAD_CONCURRENCY_PERCENT": "10",
            "WARMSTART_CACHE_EVICTION_POLICY": "EvictUnreferencedLRU",
        }
    )
    assert (read.render.preload_concurrency_nodes, read.render.preload_concurrency_percent) == (8, 10)
    assert read.render.cache_eviction_policy == "EvictUnreferencedLRU"
    defaults = settings.from_env({}).render
    assert (defaults.preload_concurrency_nodes, defaults.preload_concurrency_percent) == (16, 25)
    assert defaults.cache_eviction_policy == "Never"


def test_the_operators_aws_region_comes_from_warmstart_then_the_sdk_then_jumpstart() -> None:
    """FSx lookups and CloudWatch triggers use it (controllers/autoscaling.region)."""
    from warmstart.controllers import autoscaling

    assert settings.from_env({"WARMSTART_AWS_REGION": "eu-west-1", "AWS_REGION": "us-east-1"}).render.aws_region == (
        "eu-west-1"
    )
    assert settings.from_env({"AWS_REGION": "us-east-1"}).render.aws_region == "us-east-1"
    unset = settings.from_env({"WARMSTART_JUMPSTART_REGION": "ap-south-1"})
    assert unset.render.aws_region is None and autoscaling.region(unset.render) == "ap-south-1"
