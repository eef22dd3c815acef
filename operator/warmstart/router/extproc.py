"""The endpoint picker: Envoy's ``ExternalProcessor.Process`` stream, one HTTP request per stream, picked by the router.

The picker follows the processing modes the gateway announces. warmstart's rendered gateway sends the request body
BUFFERED and the response headers only (each message costs the picker more CPU than its pick); GIE's reference
configuration streams both bodies FULL_DUPLEX_STREAMED (with trailers), which works too. For each stream:

1. Request headers: kept; the subset hint is read from the filter metadata. Headers that end
   the request (no body) are answered with a pick at once; in BUFFERED mode they are answered
   unchanged and the pick answers the body message.
2. Request body pieces: held (under the router's body limit and byte budget) until the body ends
   (``end_of_stream``, the request trailers, or the one buffered message). Then the body is parsed
   as the proxy parses it, the request waits for a free slot like a proxied one (overload answers
   429), the router's policy picks among the hinted (or all) replicas, and the picker answers with
   the pick list in ``x-gateway-destination-endpoint`` and in the ``envoy.lb`` dynamic metadata
   (full duplex: on the held headers, then hands the body back as streamed body mutations).
3. Response: headers, body pieces and trailers pass through unchanged. The response headers'
   ``envoy.lb/x-gateway-destination-endpoint-served`` moves the accounting to the replica that
   served; the first body piece (or, with no response body sent, the headers) is the TTFT; the
   response's end (or the stream's, however it ends) releases the in-flight slot.

Refusals are immediate HTTP answers: 400 bad JSON, 413 body over the limit, 429 overload, 503 no
ready endpoint or an empty or unmatched subset hint. Prompts are never logged.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import json_format

from warmstart.router import picking, reading, replies
from warmstart.router.admission import QueueFull
from warmstart.router.assignments import Assignment
from warmstart.router.bodies import BadBody, BodyParser, ParsedBody
from warmstart.router.health import Health
from warmstart.router.reading import HeldBody, Refusal
from warmstart.router.routing import Router

log = logging.getLogger(__name__)

SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"
_FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED
_NONE = processing_mode_pb2.ProcessingMode.NONE
_NO_BODY = ParsedBody("", 0, None)
CANCELLATION_GRACE_S = 0.25
"""How long a stream that ended after the response's headers (response body mode NONE) waits to learn whether it
was cancelled, before it counts the request as served. Its slot is given back at once."""
_streams = itertools.count()


def _metadata(message: pb.ProcessingRequest, namespace: str) -> dict[str, Any]:
    """One namespace of the message's filter metadata as plain values (empty when the gateway sent none).

    Only the namespace asked for is converted: the conversion is the costliest step of a message.
    """
    filter_metadata = message.metadata_context.filter_metadata
    if namespace not in filter_metadata:
        return {}
    return {namespace: json_format.MessageToDict(filter_metadata[namespace])}


def _headers(message: pb.HttpHeaders) -> dict[str, str]:
    """Header names (lowercase, as Envoy sends them) -> value; Envoy sends values as ``raw_value`` bytes."""
    return {h.key: h.raw_value.decode("latin-1") if h.raw_value else h.value for h in message.headers.headers}


class Exchange:
    """One HTTP request's trip through the picker (one Process stream): its state and answers."""

    def __init__(self, picker: Picker) -> None:
        self.picker = picker
        self.router = picker.router
        self.started = time.perf_counter()
        self.headers: dict[str, str] = {}
        self.hint: list[str] | None = None
        self.body: HeldBody | None = None
        self.assignment: Assignment | None = None
        self.status = 0
        self.client = ""
        self.request_mode: int = _FULL_DUPLEX
        """How the gateway sends the request body (FULL_DUPLEX_STREAMED unless it says otherwise)."""
        self.streamed_response = True
        """The gateway streams the response body full-duplex: each piece must be handed back."""
        self.response_body_seen = True
        """The gateway sends the response body at all (not in mode NONE)."""
        self.picked = False
        self.done = False

    async def handle(self, message: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        """The answers to one message from the gateway (none while the request body is held)."""
        kind = message.WhichOneof("request")
        if message.HasField("protocol_config"):  # Envoy sends it on the stream's first message
            self.request_mode = message.protocol_config.request_body_mode
            self.streamed_response = message.protocol_config.response_body_mode == _FULL_DUPLEX
            self.response_body_seen = message.protocol_config.response_body_mode != _NONE
        if kind == "request_headers":
            return await self.request_headers(message)
        if kind == "request_body":
            return await self.request_body(message.request_body)
        if kind == "request_trailers":
            if self.picked:
                return [replies.request_trailers()]
            return await self.pick(end=False) + [replies.request_trailers()]
        if kind == "response_headers":
            return self.response_headers(message)
        if kind == "response_body":
            return self.response_body(message.response_body)
        if kind == "response_trailers":
            self.finish()
            return [replies.response_trailers()]
        return []

    async def request_headers(self, message: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        self.started = time.perf_counter()
        self.headers = _headers(message.request_headers)
        self.client = self._client()
        self.hint = picking.subset_hint(_metadata(message, picking.SUBSET_NAMESPACE))
        mode = self.request_mode
        if message.request_headers.end_of_stream or mode == _NONE:
            return await self.pick(end=None)
        if mode not in (_FULL_DUPLEX, _BUFFERED):
            name = processing_mode_pb2.ProcessingMode.BodySendMode.Name(mode)
            message_text = (
                f"the gateway sends request bodies in {name} mode; the endpoint picker needs "
                "FULL_DUPLEX_STREAMED (or BUFFERED, or NONE to pick without the body)"
            )
            return self.refuse(picking.Refused(500, picking.Reason.UNSUPPORTED_MODE, message_text))
        body = HeldBody(self.picker.budget, self.client)
        self.body = body
        if not body.open():
            return self.refuse(picking.Refused(429, picking.Reason.BUSY, "too many request bodies from this client"))
        if mode == _BUFFERED:
            return [replies.request_headers()]  # the gateway waits for this before it sends the body
        return []

    def _client(self) -> str:
        """Who sent the request, for the byte budget's shares: the gateway's last ``x-forwarded-for`` hop.

        Without one, each request is its own client (only the router-wide budget applies).
        """
        forwarded = self.headers.get("x-forwarded-for", "")
        hop = forwarded.rsplit(",", 1)[-1].strip()
        return hop if hop else f"stream-{next(_streams)}"

    async def request_body(self, part: pb.HttpBody) -> list[pb.ProcessingResponse]:
        body = self.body
        if body is None or self.picked:  # a body after a bodyless pick: not a stream Envoy sends
            return []
        limit = self.router.config.max_body_bytes
        if body.size + len(part.body) > limit:
            message = f"request body exceeds the endpoint picker's limit of {limit} bytes"
            return self.refuse(picking.Refused(413, picking.Reason.BODY_TOO_LARGE, message))
        if part.body:
            refusal = body.add(part.body)
            if refusal is not None:
                status = int(refusal)
                message = (
                    "this client holds its share of the picker's body buffer; retry later"
                    if refusal is Refusal.CLIENT_SHARE
                    else "the endpoint picker's body buffer is full; retry later"
                )
                return self.refuse(picking.Refused(status, picking.Reason.BUSY, message))
        if self.request_mode == _BUFFERED:  # the whole body in one message (trailers may follow)
            return await self.pick(end=None, buffered=True)
        if part.end_of_stream:
            return await self.pick(end=True)
        return []

    async def pick(self, end: bool | None, buffered: bool = False) -> list[pb.ProcessingResponse]:
        """Parse, admit, decide and answer.

        ``end`` ends the handed-back body (None: no body to hand back); ``buffered``: the pick
        answers the gateway's buffered body message instead of its held headers.
        """
        self.picked = True
        router = self.router
        config = router.config
        body = self.body
        raw = b""
        if body is not None:
            body.complete()
            raw = body.data()
        parsed = _NO_BODY
        if raw:
            try:
                parsed = await self.picker.parser.parse(
                    raw, config.block_chars * config.max_blocks, config.session_field, self.client
                )
            except BadBody as bad:
                return self.refuse(picking.Refused(400, picking.Reason.BAD_REQUEST, str(bad)))
        urls = router.fleet.urls()
        allowed: frozenset[str] | None = None
        if self.hint is not None:
            if not self.hint:
                return self.refuse(
                    picking.Refused(503, picking.Reason.SUBSET_EMPTY, "the gateway's subset hint names no endpoint")
                )
            allowed = picking.within(self.hint, urls)
        if not urls or (allowed is not None and not allowed):
            return self.refuse(picking.unavailable(hinted=allowed is not None))
        session_header = self.headers.get(config.session_header.lower())
        session = session_header if session_header else parsed.session
        try:
            await router.admission.admit(config.max_queue_size)
        except QueueFull:
            router.metrics.overflows.inc()
            message = "every model replica is at its concurrency limit and the queue is full; retry later"
            return self.refuse(picking.Refused(config.overflow_status_code, picking.Reason.OVERLOADED, message))
        # no await from admission to taking the slot
        routed = router.decide(parsed, session, only=allowed)
        candidates = routed.decision.candidates
        inflight = {url: replica.inflight for url in candidates if (replica := router.fleet.get(url)) is not None}
        outcome = picking.pick(
            [url for url in candidates if url in inflight],
            inflight,
            config.max_concurrent_requests,
            config.retries,
            hinted=allowed is not None,
        )
        if isinstance(outcome, picking.Refused):
            return self.refuse(outcome)
        replica = router.fleet.get(outcome.urls[0])
        assert replica is not None  # taken from the fleet above, with no await since
        matched_chars = routed.decision.matched_blocks * config.block_chars
        self.assignment = Assignment(
            router, replica, routed.key, max(0, routed.key.chars - matched_chars), self.started
        )
        router.metrics.added_seconds.observe(time.perf_counter() - self.started)
        answers = [replies.picked(outcome.value, in_body=buffered)]
        if end is not None:
            answers += replies.request_body(raw, end)
        if body is not None:
            body.release()
        return answers

    def refuse(self, refusal: picking.Refused) -> list[pb.ProcessingResponse]:
        """Answer the request with an immediate HTTP response; the stream is over."""
        log.debug("request refused: %d %s", refusal.status, refusal.reason.value)
        self.router.metrics.request(self.router.policy.strategy.value, "", refusal.reason.outcome).inc()
        self.done = True
        self.close()
        return [replies.refused(refusal)]

    def response_headers(self, message: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        headers = message.response_headers
        status = _headers(headers).get(":status", "")
        self.status = int(status) if status.isdigit() else 0
        served = picking.served_endpoint(_metadata(message, picking.LB_NAMESPACE))
        assignment = self.assignment
        if served is not None and assignment is not None:
            url = picking.url_in(served, self.router.fleet.urls())
            if url is not None:
                assignment.served_by(url)
        if assignment is not None and not self.response_body_seen:
            assignment.first_byte()  # the gateway does not show the body: its headers are the first byte seen
        if headers.end_of_stream:
            self.finish()
        return [replies.response_headers()]

    def response_body(self, part: pb.HttpBody) -> list[pb.ProcessingResponse]:
        if self.assignment is not None:
            self.assignment.first_byte()
        if part.end_of_stream:
            self.finish()
        return [replies.response_body(part.body, part.end_of_stream, self.streamed_response)]

    def finish(self) -> None:
        """The response is complete: release the slot with its outcome."""
        if self.assignment is not None:
            self.assignment.first_byte()
            self.assignment.release("ok" if 0 < self.status < 500 else "error")

    def response_over(self) -> None:
        """The stream ended after the response's headers: the replica is done with it either way."""
        if self.assignment is not None:
            self.assignment.give_back()

    def ends_with_stream(self) -> bool:
        """The gateway does not send the response body: the stream's end (after the headers) is the response's.

        Otherwise the response ends with its last body piece or its trailers, and a stream that
        ends before that was aborted.
        """
        return bool(self.status) and not self.response_body_seen

    def close(self) -> None:
        """The stream is over, however: release whatever the request still holds."""
        if self.body is not None:
            self.body.release()
        if self.assignment is not None:
            self.assignment.release("aborted")


async def _cancelled_within(context: grpc.aio.ServicerContext[Any, Any], grace_s: float) -> bool:
    """Whether the stream turns out cancelled within ``grace_s``.

    A cancelled stream's messages end just as a half-closed one's do; its cancellation arrives
    separately (as this task's cancellation or ``context.cancelled()``), later on a busy machine.
    One timer, not a polling loop: a cancellation that arrives meanwhile cancels this task (the
    caller's ``finally`` counts it aborted), one seen only by the context is read after the wait.
    """
    if not context.cancelled():
        await asyncio.sleep(grace_s)
    return bool(context.cancelled())


class Picker(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The ``ExternalProcessor`` service: one :class:`Exchange` per stream, over the router's fleet and policy."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.budget = reading.configured(router.config)
        self.parser = BodyParser()

    def refresh_limits(self) -> None:
        reading.configured(self.router.config, self.budget)

    async def Process(
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ProcessingResponse]:
        self.refresh_limits()
        exchange = Exchange(self)
        try:
            async for message in request_iterator:
                for answer in await exchange.handle(message):
                    yield answer
                if exchange.done:
                    return
            if exchange.ends_with_stream():
                exchange.response_over()
                if not await _cancelled_within(context, CANCELLATION_GRACE_S):
                    exchange.finish()
        finally:
            exchange.close()

    def close(self) -> None:
        self.parser.close()


class PickerServer:
    """The running gRPC server: the picker, its health services and the bound port."""

    def __init__(self, server: grpc.aio.Server, picker: Picker, health: Health, port: int) -> None:
        self.server, self.picker, self.health, self.port = server, picker, health, port

    async def stop(self, grace: float | None = 25.0) -> None:
        """Report NOT_SERVING, refuse new streams (GOAWAY), let open ones finish for up to ``grace`` seconds."""
        await self.health.shutdown()
        await self.server.stop(grace)
        self.picker.close()


async def serve(router: Router, host: str, port: int, ready: Callable[[], bool] | None = None) -> PickerServer:
    """Serve the picker and the gRPC health services on ``host:port`` (0 = any free port).

    ``ready`` is an extra readiness gate (a leader elector's "am I the leader"): readiness is
    SERVING only while the fleet has a replica and ``ready()`` is true.
    """
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    picker = Picker(router)
    health = Health(router, ready, services=(SERVICE_NAME,))
    pb_grpc.add_ExternalProcessorServicer_to_server(picker, server)
    health.add_to(server)
    bound = server.add_insecure_port(f"{host}:{port}" if ":" not in host else f"[{host}]:{port}")
    await server.start()
    health.start()
    return PickerServer(server, picker, health, bound)
