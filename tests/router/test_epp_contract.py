"""The endpoint picker's protocol rules, one test each, over a real gRPC channel to the picker (no gateway).

Mirrors the contract tests of the Gateway API Inference Extension's reference picker: the
gateway's side of the ``ExternalProcessor.Process`` stream is played message by message with
Envoy's own protos. The fleet is a fixed list of addresses: the picker never connects to the
replicas, so nothing listens there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eppharness import (
    BUFFERED,
    NO_BODY,
    STREAMED,
    Stream,
    body_pieces,
    completion,
    immediate,
    pick_of,
    request_body,
    request_headers,
    request_trailers,
    response_body,
    response_headers,
    response_trailers,
)
from warmstart.api.routers import RouterConfig
from warmstart.router import extproc, picking
from warmstart.router.routing import Router

FLEET = ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"]
ENDPOINTS = [url.removeprefix("http://") for url in FLEET]


@dataclass
class RunningPicker:
    router: Router
    server: extproc.PickerServer
    channel: grpc.aio.Channel

    def stream(self) -> Stream:
        return Stream(self.channel)

    def inflight(self) -> dict[str, int]:
        return {r["url"].removeprefix("http://"): r["inflight"] for r in self.router.status()["backends"]}

    def served(self) -> dict[str, int]:
        return {r["url"].removeprefix("http://"): r["served"] for r in self.router.status()["backends"]}


PickerFactory = Callable[..., Awaitable[RunningPicker]]


@pytest.fixture
async def pickers() -> AsyncIterator[PickerFactory]:
    """``await pickers(config, backends, ready=...)`` -> a picker serving on a loopback port, and a channel to it."""
    started: list[RunningPicker] = []

    async def start(
        config: RouterConfig | None = None, backends: list[str] | None = None, ready: Callable[[], bool] | None = None
    ) -> RunningPicker:
        router = Router(config or RouterConfig(), FLEET if backends is None else backends)
        server = await extproc.serve(router, "127.0.0.1", 0, ready=ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running = RunningPicker(router, server, channel)
        started.append(running)
        return running

    yield start
    for running in started:
        await running.channel.close()
        await running.server.stop(0)


async def settled(picker: RunningPicker) -> None:
    """Wait (bounded) until nothing is in flight."""
    for _ in range(500):
        if picker.router.status()["inflight"] == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"in-flight never returned to 0: {picker.inflight()}")


async def test_full_duplex_holds_headers_until_the_body_ends(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(strategy="prefixaware", retries=2))
    body = completion("a long shared system prompt. " * 100)
    stream = picker.stream()
    half = len(body) // 2
    await stream.send(request_headers(), request_body(body[:half], end=False), request_body(body[half:], end=True))
    answers = await stream.read_n(2)
    header, metadata = pick_of(answers[0])  # the held headers answer comes first, after the whole body
    assert header == metadata
    endpoints = header.split(",")
    assert len(endpoints) == 3 and len(set(endpoints)) == 3 and set(endpoints) <= set(ENDPOINTS)
    pieces = [answers[1]]
    while not pieces[-1].request_body.response.body_mutation.streamed_response.end_of_stream:
        pieces.append(await stream.read())
    data, ends = body_pieces(pieces)
    assert data == body and ends[-1] is True and not any(ends[:-1])
    # the slot is on the first endpoint of the pick list
    assert picker.inflight()[endpoints[0]] == 1 and sum(picker.inflight().values()) == 1
    await stream.send(response_headers(), response_body(b"data: x\n\n", end=True))
    await stream.read_n(2)
    await stream.end()
    await settled(picker)


async def test_the_pick_header_overwrites_a_destination_the_client_sent(pickers: PickerFactory) -> None:
    """A client's own ``x-gateway-destination-endpoint`` must not be appended to: the pick replaces it."""
    picker = await pickers(RouterConfig(retries=0))
    stream = picker.stream()
    await stream.send(
        request_headers({picking.DESTINATION_ENDPOINT: "169.254.169.254:80"}), request_body(completion("hi"))
    )
    answer = await stream.read()
    option = answer.request_headers.response.header_mutation.set_headers[0]
    assert option.append_action == option.OVERWRITE_IF_EXISTS_OR_ADD
    assert option.header.raw_value.decode() in ENDPOINTS
    stream.cancel()
    await settled(picker)


async def test_a_large_body_comes_back_in_pieces_of_at_most_64_kib(pickers: PickerFactory) -> None:
    picker = await pickers()
    body = completion("x" * 200_000)
    stream = picker.stream()
    await stream.send(
        request_headers(), *[request_body(body[i : i + 16384], end=False) for i in range(0, len(body), 16384)]
    )
    await stream.send(request_body(b"", end=True))
    pick_of(await stream.read())
    pieces = [await stream.read()]
    while not pieces[-1].request_body.response.body_mutation.streamed_response.end_of_stream:
        pieces.append(await stream.read())
    data, _ = body_pieces(pieces)
    assert data == body
    assert all(len(p.request_body.response.body_mutation.streamed_response.body) <= 64 * 1024 for p in pieces)
    stream.cancel()
    await settled(picker)


async def test_a_bodyless_request_is_picked_at_its_headers(pickers: PickerFactory) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers({":method": "GET", ":path": "/v1/models"}, end=True))
    header, metadata = pick_of(await stream.read())
    assert header == metadata and header.split(",")[0] in ENDPOINTS
    await stream.send(response_headers(200), response_body(b"{}", end=True))
    answers = await stream.read_n(2)
    assert [a.WhichOneof("response") for a in answers] == ["response_headers", "response_body"]
    await stream.end()
    await settled(picker)


async def test_request_trailers_end_the_body(pickers: PickerFactory) -> None:
    """With trailers, the last body piece does not end the stream: the trailers do."""
    picker = await pickers()
    body = completion("trailers")
    stream = picker.stream()
    await stream.send(request_headers(), request_body(body, end=False), request_trailers())
    answers = await stream.read_n(3)
    pick_of(answers[0])
    data, ends = body_pieces(answers[1:2])
    assert data == body and ends == [False]
    assert answers[2].WhichOneof("response") == "request_trailers"
    stream.cancel()
    await settled(picker)


@pytest.mark.parametrize(
    "hint",
    [
        ["10.0.0.2:8000"],
        "10.0.0.2:8000",
        ["10.0.0.2"],
        ["10.0.0.2:8000", "192.0.2.9:8000"],
        "10.0.0.2:8000, 10.0.0.9:1",
    ],
)
async def test_the_subset_hint_is_honoured(pickers: PickerFactory, hint: object) -> None:
    picker = await pickers(RouterConfig(strategy="roundrobin", retries=2))
    for n in range(6):
        stream = picker.stream()
        await stream.send(request_headers(hint=hint), request_body(completion(f"prompt {n}")))
        header, metadata = pick_of(await stream.read())
        assert header == metadata == "10.0.0.2:8000"  # the only eligible endpoint; no fallback outside the hint
        stream.cancel()
    await settled(picker)


async def test_a_hint_of_two_picks_only_those_two(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(strategy="roundrobin", retries=3))
    seen = set()
    for n in range(6):
        stream = picker.stream()
        await stream.send(request_headers(hint=["10.0.0.1:8000", "10.0.0.3:8000"]), request_body(completion(f"p{n}")))
        header, _ = pick_of(await stream.read())
        assert set(header.split(",")) == {"10.0.0.1:8000", "10.0.0.3:8000"}
        seen.add(header.split(",")[0])
        stream.cancel()
    assert seen == {"10.0.0.1:8000", "10.0.0.3:8000"}
    await settled(picker)


@pytest.mark.parametrize(
    ("hint", "reason"),
    [
        ([], picking.Reason.SUBSET_EMPTY),
        ("", picking.Reason.SUBSET_EMPTY),
        (["10.0.0.2:9999"], picking.Reason.SUBSET_UNMATCHED),  # a known address, another port
        (["192.0.2.1:8000"], picking.Reason.SUBSET_UNMATCHED),  # an address outside the pool: never picked
    ],
)
async def test_an_empty_or_unmatched_hint_gets_503(pickers: PickerFactory, hint: object, reason: str) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(hint=hint), request_body(completion("x")))
    status, body = immediate(await stream.read())
    assert status == 503 and body["error"]["type"] == reason
    assert sum(picker.served().values()) == 0


async def test_no_ready_endpoint_gets_503(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(max_concurrent_requests=4), backends=[])
    stream = picker.stream()
    await stream.send(request_headers(), request_body(completion("x")))
    status, body = immediate(await stream.read())
    assert status == 503 and body["error"]["type"] == picking.Reason.NO_ENDPOINT


async def test_overload_gets_429_and_a_freed_slot_picks_again(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(max_concurrent_requests=1, max_queue_size=0), backends=FLEET[:1])
    first = picker.stream()
    await first.send(request_headers(), request_body(completion("first")))
    pick_of(await first.read())
    second = picker.stream()
    await second.send(request_headers(), request_body(completion("second")))
    status, body = immediate(await second.read())
    assert status == 429 and body["error"]["type"] == picking.Reason.OVERLOADED
    strategy = picker.router.policy.strategy.value
    assert picker.router.metrics.request(strategy, "", "overflow").value == 1
    answer = second.call  # the refused stream ends; its request holds nothing
    assert await answer.read() is grpc.aio.EOF
    await first.read()  # the body handed back
    await first.send(response_headers(200, end=True))
    await first.read()
    third = picker.stream()
    await third.send(request_headers(), request_body(completion("third")))
    assert pick_of(await third.read())[0] == ENDPOINTS[0]
    third.cancel()
    await settled(picker)


async def test_a_queued_request_is_picked_when_a_slot_frees(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(max_concurrent_requests=1, max_queue_size=4), backends=FLEET[:1])
    first = picker.stream()
    await first.send(request_headers(), request_body(completion("first")))
    await first.read_n(2)
    second = picker.stream()
    await second.send(request_headers(), request_body(completion("second")))
    for _ in range(200):  # wait until the second request is queued
        if picker.router.admission.depth == 1:
            break
        await asyncio.sleep(0.01)
    assert picker.router.admission.depth == 1
    await first.send(response_headers(200, end=True))
    await first.read()
    assert pick_of(await second.read())[0] == ENDPOINTS[0]
    second.cancel()
    await settled(picker)


async def test_a_body_over_the_limit_gets_413(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(max_body_bytes=1024))
    stream = picker.stream()
    await stream.send(
        request_headers(), request_body(b"{" + b" " * 1000, end=False), request_body(b" " * 100, end=False)
    )
    status, body = immediate(await stream.read())
    assert status == 413 and "1024 bytes" in body["error"]["message"]
    assert picker.server.picker.budget.held == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"{not json", "request body is not valid JSON"), (b"[1, 2]", "request body must be a JSON object")],
)
async def test_bad_json_gets_400_with_a_clear_message(pickers: PickerFactory, body: bytes, message: str) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(), request_body(body))
    status, answer = immediate(await stream.read())
    assert status == 400 and answer["error"]["message"] == message
    assert sum(picker.served().values()) == 0 and picker.server.picker.budget.held == 0


async def test_the_served_endpoint_moves_the_accounting(pickers: PickerFactory) -> None:
    picker = await pickers(RouterConfig(strategy="roundrobin", retries=1))
    stream = picker.stream()
    await stream.send(request_headers(), request_body(completion("served elsewhere")))
    header, _ = pick_of(await stream.read())
    primary, fallback = header.split(",")
    assert picker.inflight()[primary] == 1 and picker.served()[primary] == 1
    await stream.read()
    # the primary refused the connection; the gateway served from the fallback and says so
    await stream.send(response_headers(200, served=fallback))
    assert (await stream.read()).WhichOneof("response") == "response_headers"
    assert picker.inflight()[primary] == 0 and picker.inflight()[fallback] == 1
    assert picker.served()[primary] == 0 and picker.served()[fallback] == 1
    await stream.send(response_body(b"data: [DONE]\n\n", end=True))
    await stream.read()
    await stream.end()
    await settled(picker)
    ok = picker.router.metrics.request(picker.router.policy.strategy.value, f"http://{fallback}", "ok").value
    assert ok == 1


async def test_the_response_passes_through_with_ttft_and_completion(pickers: PickerFactory) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(), request_body(completion("response path")))
    endpoint = pick_of(await stream.read())[0].split(",")[0]
    await stream.read()
    url = f"http://{endpoint}"
    ttft = picker.router.metrics.ttft_of(url)
    await stream.send(response_headers(200, served=endpoint))
    answer = await stream.read()
    assert answer.response_headers.response.header_mutation.set_headers == []
    assert sum(ttft.counts) == 0  # headers are not the first token
    chunks = [b"data: one\n\n", b"data: two\n\n"]
    for chunk in chunks:
        await stream.send(response_body(chunk))
        streamed = (await stream.read()).response_body.response.body_mutation.streamed_response
        assert streamed.body == chunk and not streamed.end_of_stream
    assert sum(ttft.counts) == 1
    assert picker.inflight()[endpoint] == 1  # not complete yet
    await stream.send(response_body(b"", end=False), response_trailers())
    answers = await stream.read_n(2)
    assert answers[1].WhichOneof("response") == "response_trailers"
    assert picker.inflight()[endpoint] == 0
    await stream.end()
    assert picker.router.metrics.request(picker.router.policy.strategy.value, url, "ok").value == 1


async def test_an_aborted_stream_leaves_nothing_in_flight(pickers: PickerFactory) -> None:
    picker = await pickers()
    streams = []
    for n in range(3):
        stream = picker.stream()
        await stream.send(request_headers(), request_body(completion(f"aborted {n}")))
        await stream.read_n(2)
        streams.append(stream)
    await streams[1].send(response_headers(200), response_body(b"data: a\n\n"))
    await streams[1].read_n(2)
    # a held body, never ended
    held = picker.stream()
    await held.send(request_headers(), request_body(b'{"prompt": "half', end=False))
    for _ in range(200):
        if picker.server.picker.budget.held:
            break
        await asyncio.sleep(0.01)
    assert picker.router.status()["inflight"] == 3 and picker.server.picker.budget.held > 0
    for stream in [*streams, held]:
        stream.cancel()
    await settled(picker)
    assert picker.server.picker.budget.held == 0
    strategy = picker.router.policy.strategy.value
    aborted = sum(picker.router.metrics.request(strategy, url, "aborted").value for url in FLEET)
    assert aborted == 3


async def counted(picker: RunningPicker, url: str, outcome: str) -> float:
    """The requests counted with ``outcome`` on ``url``, once the count is there (bounded wait): a stream that ends
    after the response headers is counted only after the picker's cancellation grace."""
    strategy = picker.router.policy.strategy.value
    deadline = asyncio.get_running_loop().time() + extproc.CANCELLATION_GRACE_S + 5.0
    while not picker.router.metrics.request(strategy, url, outcome).value:
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.01)
    return picker.router.metrics.request(strategy, url, outcome).value


async def test_without_the_response_body_the_stream_end_is_the_response_end(pickers: PickerFactory) -> None:
    """A gateway whose response body mode is NONE ends the stream when the response ends (seen with Envoy)."""
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(response_mode=NO_BODY), request_body(completion("no response body")))
    endpoint = pick_of(await stream.read())[0].split(",")[0]
    await stream.read()
    url = f"http://{endpoint}"
    await stream.send(response_headers(200))
    await stream.read()
    assert sum(picker.router.metrics.ttft_of(url).counts) == 1  # the headers are the first byte it sees
    assert picker.inflight()[endpoint] == 1
    await stream.end()
    await settled(picker)  # the slot is given back at the stream's end
    assert await counted(picker, url, "ok") == 1
    strategy = picker.router.policy.strategy.value
    assert picker.router.metrics.request(strategy, url, "aborted").value == 0
    # cancelled mid-response (the client went away): released, and counted as aborted
    cancelled = picker.stream()
    await cancelled.send(request_headers(response_mode=NO_BODY), request_body(completion("no response body")))
    endpoint = pick_of(await cancelled.read())[0].split(",")[0]
    await cancelled.read()
    await cancelled.send(response_headers(200))
    await cancelled.read()
    cancelled.cancel()
    await settled(picker)
    second = f"http://{endpoint}"
    assert await counted(picker, second, "aborted") == 1
    assert picker.router.metrics.request(strategy, second, "ok").value == (1 if second == url else 0)  # not also ok


async def test_a_stream_closed_before_the_response_counts_as_aborted(pickers: PickerFactory) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(), request_body(completion("closed")))
    endpoint = pick_of(await stream.read())[0].split(",")[0]
    await stream.read()
    await stream.end()
    await settled(picker)
    url = f"http://{endpoint}"
    assert picker.router.metrics.request(picker.router.policy.strategy.value, url, "aborted").value == 1


async def test_the_same_prefix_goes_to_the_same_replica(pickers: PickerFactory) -> None:
    """The picker uses the router's policy and index: a shared prefix sticks to one replica."""
    picker = await pickers(RouterConfig(strategy="prefixaware", retries=0))
    shared = "You are a helpful assistant with a long shared context. " * 40
    picks = set()
    for n in range(5):
        stream = picker.stream()
        await stream.send(request_headers(), request_body(completion(shared + f"question {n}")))
        picks.add(pick_of(await stream.read())[0])
        await stream.read()
        await stream.send(response_headers(200, end=True))
        await stream.read()
        await stream.end()
    assert len(picks) == 1


async def test_the_prompt_is_never_logged(pickers: PickerFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="warmstart")
    picker = await pickers(RouterConfig(max_body_bytes=1024))
    secret = "SECRET-PROMPT-TEXT-4711"
    for body in (completion(secret), b"{" + secret.encode(), completion(secret * 100)):
        stream = picker.stream()
        await stream.send(request_headers(), request_body(body))
        await stream.read()
        stream.cancel()
    await settled(picker)
    assert secret not in caplog.text


async def _check(channel: grpc.aio.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    return int(answer.status)


async def test_health_services(pickers: PickerFactory) -> None:
    leader = [False]
    picker = await pickers(backends=[], ready=lambda: leader[0])
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    gated = ["readiness", extproc.SERVICE_NAME, ""]
    assert await _check(picker.channel, "liveness") == serving
    assert [await _check(picker.channel, s) for s in gated] == [not_serving] * 3  # no replica
    picker.router.set_backends(FLEET)
    assert [await _check(picker.channel, s) for s in gated] == [not_serving] * 3  # the gate says no
    leader[0] = True
    assert [await _check(picker.channel, s) for s in gated] == [serving] * 3
    picker.router.set_backends([])
    assert [await _check(picker.channel, s) for s in gated] == [not_serving] * 3
    assert await _check(picker.channel, "liveness") == serving
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await _check(picker.channel, "no.such.Service")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_health_watch_follows_readiness(pickers: PickerFactory) -> None:
    picker = await pickers(backends=[])
    picker.server.health.interval = 0.02
    stub = health_pb2_grpc.HealthStub(picker.channel)
    watch = stub.Watch(health_pb2.HealthCheckRequest(service="readiness"))
    first = await asyncio.wait_for(watch.read(), 30)
    assert first.status == health_pb2.HealthCheckResponse.NOT_SERVING
    picker.router.set_backends(FLEET)
    second = await asyncio.wait_for(watch.read(), 30)
    assert second.status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()


async def test_buffered_mode_answers_the_headers_and_picks_with_the_body(pickers: PickerFactory) -> None:
    """A gateway in BUFFERED mode waits for the headers answer, then sends the whole body in one message."""
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(mode=BUFFERED))
    answer = await stream.read()
    assert answer.WhichOneof("response") == "request_headers"
    assert not answer.request_headers.response.header_mutation.set_headers
    await stream.send(request_body(completion("buffered")))
    header, metadata = pick_of(await stream.read(), phase="request_body")
    assert header == metadata and header.split(",")[0] in ENDPOINTS
    assert sum(picker.inflight().values()) == 1
    await stream.send(response_headers(200, end=True))
    await stream.read()
    await stream.end()
    await settled(picker)


async def test_no_body_mode_picks_at_the_headers(pickers: PickerFactory) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(mode=NO_BODY))
    header, metadata = pick_of(await stream.read())
    assert header == metadata
    stream.cancel()
    await settled(picker)


async def test_streamed_mode_is_refused_with_a_clear_message(pickers: PickerFactory) -> None:
    """STREAMED forwards the headers before the body ends, so the pick could never reach them."""
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(mode=STREAMED))
    status, body = immediate(await stream.read())
    assert status == 500 and body["error"]["type"] == picking.Reason.UNSUPPORTED_MODE
    assert "FULL_DUPLEX_STREAMED" in body["error"]["message"]


async def test_one_client_cannot_hold_the_whole_body_buffer(pickers: PickerFactory) -> None:
    """Bodies held while they arrive count against the client's share (its address as the gateway forwards it)."""
    picker = await pickers(RouterConfig(max_buffered_bytes=64 * 1024, max_buffered_bytes_per_client=8 * 1024))
    hog = picker.stream()
    await hog.send(
        request_headers({"x-forwarded-for": "203.0.113.7"}), request_body(b'{"prompt": "' + b"a" * 6000, end=False)
    )
    second = picker.stream()
    await second.send(
        request_headers({"x-forwarded-for": "203.0.113.7"}), request_body(b'{"prompt": "' + b"b" * 6000, end=False)
    )
    status, body = immediate(await second.read())
    assert status == 429 and body["error"]["type"] == picking.Reason.BUSY
    other = picker.stream()  # another client still gets through
    await other.send(request_headers({"x-forwarded-for": "198.51.100.1"}), request_body(completion("other")))
    pick_of(await other.read())
    for stream in (hog, other):
        stream.cancel()
    await settled(picker)
    for _ in range(200):
        if picker.server.picker.budget.held == 0:
            break
        await asyncio.sleep(0.01)
    assert picker.server.picker.budget.held == 0


async def test_stopping_lets_open_responses_finish_and_refuses_new_streams(pickers: PickerFactory) -> None:
    picker = await pickers()
    stream = picker.stream()
    await stream.send(request_headers(), request_body(completion("draining")))
    await stream.read_n(2)
    await stream.send(response_headers(200))
    await stream.read()
    stopping = asyncio.create_task(picker.server.stop(30))
    for _ in range(200):  # wait until the server refuses new streams
        refused = picker.stream()
        try:
            await refused.send(request_headers(end=True))
            await refused.read()
        except (grpc.aio.AioRpcError, AssertionError):
            break
        refused.cancel()
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("a stopping picker still accepted new streams")
    await stream.send(response_body(b"data: [DONE]\n\n", end=True))  # the open response goes on
    assert (await stream.read()).WhichOneof("response") == "response_body"
    await stream.end()
    await asyncio.wait_for(stopping, 30)
    assert picker.router.status()["inflight"] == 0
