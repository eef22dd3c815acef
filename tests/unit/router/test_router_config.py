"""RouterConfig: strategy spellings, camelCase round trip, ConfigMap key, file loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from warmstart.api.routers import CONFIGMAP_KEY, RouterConfig
from warmstart.api.strategies import SPELLINGS, RoutingStrategy


@pytest.mark.parametrize(("spelling", "expected"), sorted(SPELLINGS.items()))
def test_every_accepted_spelling_maps_to_its_strategy(spelling: str, expected: RoutingStrategy) -> None:
    assert RouterConfig(strategy=spelling).strategy is expected


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [("PrefixAware", RoutingStrategy.PREFIXAWARE), ("Round-Robin", RoutingStrategy.ROUNDROBIN)],
)
def test_spellings_are_read_case_insensitively_with_dashes(spelling: str, expected: RoutingStrategy) -> None:
    assert RouterConfig(strategy=spelling).strategy is expected


def test_kvaware_is_served_by_prefixaware() -> None:
    config = RouterConfig(strategy="kvaware")
    assert config.strategy is RoutingStrategy.KVAWARE
    assert config.effective_strategy is RoutingStrategy.PREFIXAWARE


def test_unknown_strategy_is_rejected_with_the_accepted_list() -> None:
    with pytest.raises(ValidationError, match="accepted"):
        RouterConfig(strategy="fastest")


def test_defaults_are_random_and_no_cap() -> None:
    config = RouterConfig()
    assert config.strategy is RoutingStrategy.RANDOM
    assert config.max_concurrent_requests is None
    assert config.block_chars == 256


def test_yaml_round_trip_uses_camel_case_aliases() -> None:
    config = RouterConfig(strategy="prefix_aware", max_concurrent_requests=32, load_epsilon=0.1)
    text = config.to_yaml()
    assert "maxConcurrentRequests: 32" in text
    assert "strategy: prefixaware" in text
    assert RouterConfig.from_yaml(text) == config


def test_snake_case_and_routing_strategy_keys_are_accepted() -> None:
    config = RouterConfig.from_yaml("routingStrategy: least_outstanding_requests\nblock_chars: 128\n")
    assert config.strategy is RoutingStrategy.LEASTOUTSTANDING
    assert config.block_chars == 128


def test_configmap_data_without_the_key_gives_defaults() -> None:
    assert RouterConfig.from_configmap_data({}) == RouterConfig()
    assert RouterConfig.from_configmap_data({CONFIGMAP_KEY: "strategy: session"}).strategy is RoutingStrategy.SESSION


def test_json_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "router.json"
    path.write_text('{"strategy": "roundrobin", "maxBodyBytes": 4096}')
    config = RouterConfig.from_file(path)
    assert config.strategy is RoutingStrategy.ROUNDROBIN
    assert config.max_body_bytes == 4096


def test_non_mapping_document_is_rejected() -> None:
    with pytest.raises(ValueError, match="mapping"):
        RouterConfig.from_yaml("- a\n- b\n")
