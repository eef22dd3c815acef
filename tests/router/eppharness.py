"""What the endpoint picker's contract tests send and read: ext_proc messages as a gateway builds them, a stream driver.

The messages are Envoy's own (``xds-protos``), sent over a real gRPC channel to the picker's
server; nothing here imitates Envoy's behaviour beyond the message order its ext_proc filter
uses in ``FULL_DUPLEX_STREAMED`` mode (headers, body pieces, optional trailers, then the response).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import json_format, struct_pb2

from warmstart.router import picking

FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED
STREAMED = processing_mode_pb2.ProcessingMode.STREAMED
NO_BODY = processing_mode_pb2.ProcessingMode.NONE


def _metadata(filter_metadata: Mapping[str, Mapping[str, Any]] | None) -> base_pb2.Metadata:
    metadata = base_pb2.Metadata()
    for name, values in (filter_metadata or {}).items():
        struct = struct_pb2.Struct()
        struct.update(dict(values))
        metadata.filter_metadata[name].CopyFrom(struct)
    return metadata


def _header_map(headers: Mapping[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=key, raw_value=value.encode()) for key, value in headers.items()]
    )


def request_headers(
    headers: Mapping[str, str] | None = None,
    end: bool = False,
    hint: object = None,
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
    mode: int = FULL_DUPLEX,
    response_mode: int = FULL_DUPLEX,
) -> pb.ProcessingRequest:
    """Request headers (``:method`` POST etc.), with the subset hint ``hint`` when it is not None.

    ``mode`` and ``response_mode`` are the request and response body modes the gateway announces.
    """
    base = {":method": "POST", ":path": "/v1/completions", ":authority": "gw", "content-type": "application/json"}
    filter_metadata = dict(metadata or {})
    if hint is not None:
        filter_metadata[picking.SUBSET_NAMESPACE] = {picking.SUBSET_KEY: hint}
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=_header_map({**base, **(headers or {})}), end_of_stream=end),
        metadata_context=_metadata(filter_metadata),
        protocol_config=pb.ProtocolConfiguration(request_body_mode=mode, response_body_mode=response_mode),
    )


def request_body(data: bytes, end: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=end))


def request_trailers() -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_trailers=pb.HttpTrailers(trailers=_header_map({"x-trailer": "1"})))


def response_headers(status: int = 200, served: str | None = None, end: bool = False) -> pb.ProcessingRequest:
    metadata = {picking.LB_NAMESPACE: {picking.SERVED_KEY: served}} if served is not None else None
    return pb.ProcessingRequest(
        response_headers=pb.HttpHeaders(
            headers=_header_map({":status": str(status), "content-type": "text/event-stream"}), end_of_stream=end
        ),
        metadata_context=_metadata(metadata),
    )


def response_body(data: bytes, end: bool = False) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=data, end_of_stream=end))


def response_trailers() -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_trailers=pb.HttpTrailers(trailers=_header_map({"grpc-status": "0"})))


def completion(prompt: str, **fields: object) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4, **fields}).encode()


class Stream:
    """One ``Process`` stream, driven message by message."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.call = pb_grpc.ExternalProcessorStub(channel).Process()

    async def send(self, *messages: pb.ProcessingRequest) -> None:
        for message in messages:
            await self.call.write(message)

    async def read(self) -> pb.ProcessingResponse:
        """The next answer (bounded wait, so a missing answer fails the test instead of hanging it)."""
        answer = await asyncio.wait_for(self.call.read(), 30)
        assert answer is not grpc.aio.EOF, "the picker ended the stream"
        return answer

    async def read_n(self, count: int) -> list[pb.ProcessingResponse]:
        return [await self.read() for _ in range(count)]

    async def end(self) -> None:
        """The gateway closes its side; the picker must end the stream too."""
        await self.call.done_writing()
        rest = await asyncio.wait_for(self.call.read(), 30)
        assert rest is grpc.aio.EOF, f"unexpected answer after the end: {rest}"

    def cancel(self) -> None:
        self.call.cancel()


def pick_of(answer: pb.ProcessingResponse, phase: str = "request_headers") -> tuple[str, str]:
    """(the destination header's value, the ``envoy.lb`` dynamic metadata's value) of a headers (or body) answer."""
    assert answer.WhichOneof("response") == phase, answer
    headers = getattr(answer, phase).response.header_mutation.set_headers
    values = [h.header.raw_value.decode() for h in headers if h.header.key == picking.DESTINATION_ENDPOINT]
    assert len(values) == 1, headers
    metadata = json_format.MessageToDict(answer.dynamic_metadata)
    return values[0], metadata[picking.LB_NAMESPACE][picking.DESTINATION_ENDPOINT]


def immediate(answer: pb.ProcessingResponse) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of an immediate answer."""
    assert answer.WhichOneof("response") == "immediate_response", answer
    return answer.immediate_response.status.code, json.loads(answer.immediate_response.body)


def body_pieces(answers: Sequence[pb.ProcessingResponse]) -> tuple[bytes, list[bool]]:
    """The request body handed back by streamed mutations, and each piece's end_of_stream."""
    data, ends = b"", []
    for answer in answers:
        assert answer.WhichOneof("response") == "request_body", answer
        streamed = answer.request_body.response.body_mutation.streamed_response
        data += streamed.body
        ends.append(streamed.end_of_stream)
    return data, ends
