"""An Envoy bootstrap configured as a Gateway API Inference Extension gateway: Envoy asks an endpoint picker.

It follows GIE's reference gateway configuration: one listener whose HTTP connection manager runs the `ext_proc` filter
against the picker, then routes to an ORIGINAL_DST cluster that takes the destination from the
`x-gateway-destination-endpoint` header the picker sets. `failureMode` maps to `failure_mode_allow`; with FailOpen a
request the picker did not place goes to the model Service instead.

The picker is sent as few messages as it needs, since each costs it more CPU than its pick (Python gRPC, measured):
- the request body BUFFERED: one message carries the whole body, the picker answers it with the pick and sends
  nothing back (Envoy keeps its copy). It is also what FailOpen needs: Envoy answers 500 when the picker fails after
  a FULL_DUPLEX_STREAMED body went to it, whatever `failure_mode_allow` says (measured on Envoy 1.40), where a
  buffered body still goes on to the model Service. The listener's buffer limit is the largest body a request may
  carry (`max_request_bytes`; over it Envoy answers 413 itself);
- the response headers (the status, and the endpoint that served), but not the response body, unless
  `response_bodies` asks for it: every streamed event would otherwise make a round trip through the picker. Without
  it the picker counts the first byte at the response headers and the response's end at the stream's end; with it
  (FULL_DUPLEX_STREAMED) the picker measures time to first token, which its prefill-aware load estimate uses.

What a plain Envoy needs besides, for the protocol:
- the client's own `x-gateway-destination-endpoint` is removed as the request arrives, before any route is chosen, so
  no client chooses a host (with FailOpen and the picker down it would otherwise pick any address Envoy reaches);
- the endpoint that served is written back as `envoy.lb/x-gateway-destination-endpoint-served` metadata on the
  response, which the picker reads from its metadata context (the route adds it as a header from Envoy's own
  upstream address, and a header-to-metadata rule moves it into metadata before the picker sees the response);
- ORIGINAL_DST reads a single `ip:port`, and the picker may name fallbacks after its pick (`a,b`, in retry order): a
  Lua filter after the picker keeps the first, so the fallbacks are not tried by this gateway;
- an optional static subset hint (`envoy.lb.subset_hint/x-gateway-destination-endpoint-subset`), as a Gateway sets
  one for a route that may use only part of the pool.

The admin interface listens on loopback only. The output is a plain dict (dump it with `yaml.safe_dump`); nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Config = dict[str, Any]
FailureMode = Literal["FailOpen", "FailClose"]

#: the picker's answer: the chosen endpoint as `ip:port`, as a request header and as `envoy.lb` metadata
DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
#: the endpoint that really served, read back by the picker from the response's metadata context
SERVED_KEY = "x-gateway-destination-endpoint-served"
#: the gateway's hint: the endpoints this request may use
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"

PICKER_CLUSTER = "endpoint_picker"
ORIGINAL_DST_CLUSTER = "original_destination_cluster"
FALLBACK_CLUSTER = "model_service"

_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_EARLY_HEADER_MUTATION = (
    "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation"
)
_HEADER_TO_METADATA = "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config"
_SET_METADATA = "type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config"
_LUA = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
#: ORIGINAL_DST reads one `ip:port`; the picker may name fallbacks after it (`a,b`): keep the first
_FIRST_PICK = f"""
function envoy_on_request(handle)
  local headers = handle:headers()
  local pick = headers:get("{DESTINATION_HEADER}")
  if pick ~= nil and string.find(pick, ",", 1, true) ~= nil then
    headers:replace("{DESTINATION_HEADER}", string.match(pick, "^[^,]*"))
  end
end
"""
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


@dataclass(frozen=True)
class Address:
    """A host (an IP or a DNS name) and a port."""

    host: str
    port: int


@dataclass(frozen=True)
class GatewaySpec:
    """What the gateway needs: where it listens, where the picker is, and what to do when the picker fails."""

    #: the picker's gRPC address (its ext_proc service)
    picker: Address
    #: FailOpen: a request the picker cannot place goes to `fallback`; FailClose: the client gets a 5xx
    failure_mode: FailureMode = "FailClose"
    #: the model Service (FailOpen's destination); required with FailOpen
    fallback: Sequence[Address] = ()
    listen: Address = Address("0.0.0.0", 8081)
    #: the admin interface; it stays on loopback whatever is asked
    admin_port: int = 19000
    #: a static subset hint for every request (None: no hint, so the picker chooses from the whole pool)
    subset_hint: Sequence[str] | None = None
    #: how long the picker may take to answer one message (seconds)
    message_timeout_s: float = 10.0
    #: how long Envoy waits to open a connection to a model pod (seconds)
    connect_timeout_s: float = 10.0
    #: the picker sees the response body (time to first token, for the prefill-aware estimate); one message per piece
    response_bodies: bool = False
    #: the largest request body Envoy buffers for the picker (the listener's buffer limit; the router's default)
    max_request_bytes: int = 8 * 1024 * 1024


def bootstrap(spec: GatewaySpec) -> Config:
    """The whole Envoy bootstrap: admin on loopback, one listener, the picker, ORIGINAL_DST and fallback clusters."""
    if spec.failure_mode not in ("FailOpen", "FailClose"):
        raise ValueError(f"failure mode must be FailOpen or FailClose, not {spec.failure_mode!r}")
    if spec.failure_mode == "FailOpen" and not spec.fallback:
        raise ValueError("FailOpen needs a fallback: the model Service that serves when the picker cannot")
    clusters = [picker_cluster(spec), original_destination_cluster(spec)]
    if spec.fallback:
        clusters.append(fallback_cluster(spec))
    return {
        "admin": {"address": _socket("127.0.0.1", spec.admin_port)},
        "static_resources": {"listeners": [listener(spec)], "clusters": clusters},
    }


def listener(spec: GatewaySpec) -> Config:
    manager = {
        "@type": _HCM,
        "stat_prefix": "inference_gateway",
        "codec_type": "AUTO",
        # before the route is chosen: no client header can select the ORIGINAL_DST route or its address
        "early_header_mutation_extensions": [
            {
                "name": "envoy.http.early_header_mutation.header_mutation",
                "typed_config": {
                    "@type": _EARLY_HEADER_MUTATION,
                    "mutations": [{"remove": DESTINATION_HEADER}],
                },
            }
        ],
        "route_config": route_config(spec),
        "http_filters": http_filters(spec),
    }
    return {
        "name": "inference_gateway",
        "address": _socket(spec.listen.host, spec.listen.port),
        # the buffered request body must fit (Envoy's default is 1 MiB)
        "per_connection_buffer_limit_bytes": spec.max_request_bytes,
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }


def http_filters(spec: GatewaySpec) -> list[Config]:
    """(The gateway's subset hint,) ask the picker, move the served endpoint into metadata, route."""
    filters: list[Config] = []
    if spec.subset_hint is not None:
        filters.append(
            {
                "name": "subset_hint",
                "typed_config": {
                    "@type": _SET_METADATA,
                    "metadata": [
                        {"metadata_namespace": SUBSET_NAMESPACE, "value": {SUBSET_KEY: list(spec.subset_hint)}}
                    ],
                },
            }
        )
    filters.append({"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc(spec)})
    filters.append(
        {"name": "first_pick", "typed_config": {"@type": _LUA, "default_source_code": {"inline_string": _FIRST_PICK}}}
    )
    # encoders run in reverse order: this one sees the response before the picker does
    filters.append(
        {
            "name": "served_endpoint",
            "typed_config": {
                "@type": _HEADER_TO_METADATA,
                "response_rules": [
                    {
                        "header": SERVED_KEY,
                        "on_header_present": {"metadata_namespace": DESTINATION_NAMESPACE, "key": SERVED_KEY},
                        "remove": True,
                    }
                ],
            },
        }
    )
    filters.append({"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}})
    return filters


def ext_proc(spec: GatewaySpec) -> Config:
    """The `ext_proc` filter as GIE's gateways configure it."""
    return {
        "@type": _EXT_PROC,
        "grpc_service": {
            "envoy_grpc": {"cluster_name": PICKER_CLUSTER, "authority": f"{spec.picker.host}:{spec.picker.port}"},
            "timeout": _seconds(spec.message_timeout_s),
        },
        "failure_mode_allow": spec.failure_mode == "FailOpen",
        "allow_mode_override": False,
        "processing_mode": processing_mode(spec),
        "message_timeout": _seconds(spec.message_timeout_s),
        # the picker's header changes the route (ORIGINAL_DST vs the fallback): always re-select it
        "route_cache_action": "CLEAR",
        "metadata_options": {
            "forwarding_namespaces": {"untyped": [SUBSET_NAMESPACE, DESTINATION_NAMESPACE]},
            "receiving_namespaces": {"untyped": [DESTINATION_NAMESPACE]},
        },
    }


def processing_mode(spec: GatewaySpec) -> Config:
    """What Envoy sends the picker: headers both ways, the request body buffered, the response body if asked."""
    return {
        "request_header_mode": "SEND",
        "request_body_mode": "BUFFERED",
        "request_trailer_mode": "SEND",
        "response_header_mode": "SEND",
        "response_body_mode": "FULL_DUPLEX_STREAMED" if spec.response_bodies else "NONE",
        "response_trailer_mode": "SEND" if spec.response_bodies else "SKIP",
    }


def route_config(spec: GatewaySpec) -> Config:
    """A picked request goes to its endpoint; one the picker did not place goes to the fallback, or gets 503."""
    picked = {
        "match": {"prefix": "/", "headers": [{"name": DESTINATION_HEADER, "present_match": True}]},
        "route": {"cluster": ORIGINAL_DST_CLUSTER, "timeout": "0s"},
        "response_headers_to_add": [
            {
                "header": {"key": SERVED_KEY, "value": "%UPSTREAM_REMOTE_ADDRESS%"},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            }
        ],
    }
    unplaced: Config
    if spec.failure_mode == "FailOpen":
        unplaced = {"match": {"prefix": "/"}, "route": {"cluster": FALLBACK_CLUSTER, "timeout": "0s"}}
    else:
        unplaced = {
            "match": {"prefix": "/"},
            "direct_response": {"status": 503, "body": {"inline_string": "no endpoint picked\n"}},
        }
    return {
        "name": "inference",
        "virtual_hosts": [{"name": "inference", "domains": ["*"], "routes": [picked, unplaced]}],
    }


def picker_cluster(spec: GatewaySpec) -> Config:
    """The picker over HTTP/2 (gRPC)."""
    return {
        "name": PICKER_CLUSTER,
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_ONLY",
        "connect_timeout": "5s",
        "lb_policy": "ROUND_ROBIN",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _HTTP_OPTIONS,
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": _assignment(PICKER_CLUSTER, [spec.picker]),
    }


def original_destination_cluster(spec: GatewaySpec) -> Config:
    """Connects to whatever `ip:port` the picker put in the destination header (and nothing else)."""
    return {
        "name": ORIGINAL_DST_CLUSTER,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": _seconds(spec.connect_timeout_s),
        "dns_lookup_family": "V4_ONLY",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        "circuit_breakers": {
            "thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}]
        },
    }


def fallback_cluster(spec: GatewaySpec) -> Config:
    """The model Service: where FailOpen sends requests the picker did not place."""
    return {
        "name": FALLBACK_CLUSTER,
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_ONLY",
        "connect_timeout": _seconds(spec.connect_timeout_s),
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": _assignment(FALLBACK_CLUSTER, list(spec.fallback)),
    }


def _assignment(name: str, addresses: Sequence[Address]) -> Config:
    endpoints = [{"endpoint": {"address": _socket(a.host, a.port)}} for a in addresses]
    return {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]}


def _socket(host: str, port: int) -> Config:
    return {"socket_address": {"address": host, "port_value": port}}


def _seconds(value: float) -> str:
    return f"{value:g}s"
