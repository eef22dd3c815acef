"""The ext_proc messages the endpoint picker sends back to the gateway, built from plain values.

One function per message kind, with Envoy's protos from ``xds-protos``: the held request-headers
answer carrying the pick (header and ``envoy.lb`` dynamic metadata, equal), a body handed back
as streamed body mutations (the gateway's full-duplex mode forwards only what the picker returns),
pass-through answers for the response path, and an immediate HTTP answer for refusals.
"""

from __future__ import annotations

import json

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from warmstart.router import picking

#: Largest body piece per message: Envoy recommends at most 64 KiB per streamed chunk.
CHUNK_BYTES = 60 * 1024

#: Seconds a refused client is asked to wait before retrying (429 and 503).
RETRY_AFTER_SECONDS = 1

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def _header(name: str, value: str) -> base_pb2.HeaderValueOption:
    # overwrite: a destination header the client sent itself must not survive next to the pick
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, raw_value=value.encode("latin-1")), append_action=_OVERWRITE
    )


def picked(value: str, in_body: bool = False) -> pb.ProcessingResponse:
    """The pick: header ``x-gateway-destination-endpoint`` and ``envoy.lb`` metadata, both ``value``.

    It answers the held request headers; with ``in_body``, the buffered request body (the
    gateway's BUFFERED mode, where the headers were answered already and are mutated here).
    """
    metadata = struct_pb2.Struct()
    metadata.update({picking.LB_NAMESPACE: {picking.DESTINATION_ENDPOINT: value}})
    common = pb.CommonResponse(
        header_mutation=pb.HeaderMutation(set_headers=[_header(picking.DESTINATION_ENDPOINT, value)]),
        clear_route_cache=True,
    )
    if in_body:
        return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=metadata)
    return pb.ProcessingResponse(request_headers=pb.HeadersResponse(response=common), dynamic_metadata=metadata)


def request_headers() -> pb.ProcessingResponse:
    """The request headers go on unchanged (BUFFERED mode: the pick comes with the body)."""
    return pb.ProcessingResponse(request_headers=pb.HeadersResponse(response=pb.CommonResponse()))


def _streamed(data: bytes, end: bool) -> pb.CommonResponse:
    return pb.CommonResponse(
        body_mutation=pb.BodyMutation(streamed_response=pb.StreamedBodyResponse(body=data, end_of_stream=end))
    )


def request_body(data: bytes, end: bool) -> list[pb.ProcessingResponse]:
    """``data`` handed back as streamed request-body pieces; the last one ends the body when ``end``."""
    pieces = [data[start : start + CHUNK_BYTES] for start in range(0, len(data), CHUNK_BYTES)] or [b""]
    last = len(pieces) - 1
    return [
        pb.ProcessingResponse(request_body=pb.BodyResponse(response=_streamed(piece, end and index == last)))
        for index, piece in enumerate(pieces)
    ]


def request_trailers() -> pb.ProcessingResponse:
    return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())


def response_headers() -> pb.ProcessingResponse:
    """The response's headers go on unchanged."""
    return pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=pb.CommonResponse()))


def response_body(data: bytes, end: bool, streamed: bool) -> pb.ProcessingResponse:
    """A response-body piece: handed back as is in full-duplex mode, else let through unchanged."""
    common = _streamed(data, end) if streamed else pb.CommonResponse()
    return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))


def response_trailers() -> pb.ProcessingResponse:
    return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())


def refused(refusal: picking.Refused) -> pb.ProcessingResponse:
    """An immediate HTTP answer: the status, an OpenAI-style JSON error, ``Retry-After`` on 429 and 503."""
    body = {"error": {"message": refusal.message, "type": refusal.reason.value, "code": refusal.status}}
    headers = [_header("content-type", "application/json")]
    if refusal.status in (429, 503):
        headers.append(_header("retry-after", str(RETRY_AFTER_SECONDS)))
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=refusal.status),
            headers=pb.HeaderMutation(set_headers=headers),
            body=json.dumps(body).encode(),
            details=f"warmstart_picker_{refusal.reason.value}",
        )
    )
