"""The HTTP reverse proxy: validate the request, ask the router for candidates, stream the reply.

One ``aiohttp.ClientSession`` lives for the application's lifetime (``cleanup_ctx``). Each
forwarded request holds one in-flight slot on its replica, taken just before the upstream call
and released in exactly one ``finally`` - whatever happens: success, client disconnect (the
server runs with handler cancellation on), timeout, or a backend that dies mid-stream.
Prompts are never logged; only sizes, hashes and outcomes are.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from warmstart.router.replicas import Replica
from warmstart.router.routing import Routed, Router

log = logging.getLogger(__name__)

ROUTER_KEY: web.AppKey[Router] = web.AppKey("router", Router)
SESSION_KEY: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", "/invocations")

#: Request headers not passed upstream (hop-by-hop, or recomputed by the client session).
_DROP_REQUEST = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "accept-encoding",
    "expect",
}
#: Response headers not passed back (hop-by-hop, or recomputed by the server).
_DROP_RESPONSE = {
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-encoding",
    "server",
    "date",
}


class _PrefillClaim:
    """A request's share of its replica's estimated prefill backlog, released exactly once."""

    __slots__ = ("chars", "replica")

    def __init__(self, replica: Replica, chars: int) -> None:
        self.replica, self.chars = replica, chars
        replica.prefill_chars += chars

    def release(self) -> None:
        if self.chars:
            self.replica.prefill_chars -= self.chars
            self.chars = 0


def error_response(status: int, message: str, kind: str) -> web.Response:
    """An OpenAI-style JSON error."""
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _error_event(message: str) -> bytes:
    payload = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def make_app(router: Router) -> web.Application:
    """The router's aiohttp application (the caller adds discovery tasks to ``cleanup_ctx``)."""
    app = web.Application(client_max_size=1024**3)  # the body limit is enforced per request below
    app[ROUTER_KEY] = router
    app.cleanup_ctx.append(_client_session)
    for path in GENERATE_PATHS:
        app.router.add_post(path, handle_generate)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/router/status", handle_status)
    app.router.add_get("/metrics", handle_metrics)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=30, keepalive_timeout=30)
    session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
    app[SESSION_KEY] = session
    yield
    await session.close()


async def _read_body(request: web.Request, limit: int) -> bytes | web.Response:
    if request.content_length is not None and request.content_length > limit:
        return error_response(413, f"request body exceeds {limit} bytes", "request_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return error_response(413, f"request body exceeds {limit} bytes", "request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


async def handle_generate(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions, /v1/chat/completions, /invocations."""
    started = time.perf_counter()
    router = request.app[ROUTER_KEY]
    config = router.config
    strategy = router.policy.strategy.value
    if not _is_json(request.content_type):
        router.metrics.request(strategy, "", "bad_request").inc()
        return error_response(415, "content type must be application/json", "invalid_request_error")
    raw = await _read_body(request, config.max_body_bytes)
    if isinstance(raw, web.Response):
        router.metrics.request(strategy, "", "bad_request").inc()
        return raw
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        router.metrics.request(strategy, "", "bad_request").inc()
        return error_response(400, "request body is not valid JSON", "invalid_request_error")
    if not isinstance(body, dict):
        router.metrics.request(strategy, "", "bad_request").inc()
        return error_response(400, "request body must be a JSON object", "invalid_request_error")
    session_key = request.headers.get(config.session_header)
    if session_key is None and isinstance(body.get(config.session_field), str | int):
        session_key = str(body[config.session_field])
    routed = router.decide(request.path, body, session_key)
    if not routed.decision.candidates:
        router.metrics.request(strategy, "", "no_replica").inc()
        return error_response(503, "no ready model replicas behind this router", "service_unavailable")
    return await _forward(request, router, routed, raw, started)


async def _forward(
    request: web.Request, router: Router, routed: Routed, raw: bytes, started: float
) -> web.StreamResponse:
    """Send to the first candidate; on connection refused, retry once on the next."""
    config = router.config
    strategy = router.policy.strategy.value
    session = request.app[SESSION_KEY]
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=config.connect_timeout_seconds,
        sock_connect=config.connect_timeout_seconds,
        sock_read=config.read_timeout_seconds,
    )
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
    attempts = [url for url in routed.decision.candidates[: 1 + config.retries]]
    for attempt, url in enumerate(attempts):
        replica = router.fleet.get(url)
        if replica is None:  # removed between decision and send
            continue
        last = attempt == len(attempts) - 1
        router.policy.placed(url, routed.key)
        replica.inflight += 1
        replica.served += 1
        router.metrics.inflight_of(url).set(replica.inflight)
        matched_chars = routed.decision.matched_blocks * config.block_chars if attempt == 0 else 0
        claim = _PrefillClaim(replica, max(0, routed.key.chars - matched_chars))
        outcome = "aborted"
        try:
            pre = time.perf_counter()
            try:
                upstream = await session.post(url + request.path_qs, data=raw, headers=headers, timeout=timeout)
            except aiohttp.ClientConnectorError:
                outcome = "refused"
                log.warning("replica %s refused the connection (attempt %d)", url, attempt + 1)
                if last:
                    return error_response(502, "model replica refused the connection", "upstream_error")
                continue
            except (TimeoutError, aiohttp.ClientError) as exc:
                outcome = "error"
                log.warning("replica %s failed before responding: %s", url, type(exc).__name__)
                return error_response(502, "model replica failed before responding", "upstream_error")
            added = pre - started
            try:
                response, outcome = await _relay(request, upstream, added, router, claim)
            finally:
                if outcome == "ok":
                    upstream.release()
                else:  # do not reuse a connection whose response was not read to the end
                    upstream.close()
            return response
        finally:
            claim.release()
            replica.inflight -= 1
            if router.fleet.get(url) is replica:
                router.metrics.inflight_of(url).set(replica.inflight)
            router.metrics.request(strategy, url, outcome).inc()
    return error_response(503, "no ready model replicas behind this router", "service_unavailable")


async def _relay(
    request: web.Request, upstream: aiohttp.ClientResponse, added: float, router: Router, claim: _PrefillClaim
) -> tuple[web.StreamResponse, str]:
    """Pass the upstream response back: SSE chunk by chunk, anything else buffered."""
    headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE}
    relay_started = time.perf_counter()
    if upstream.content_type != "text/event-stream":
        try:
            data = await upstream.read()
            claim.release()
        except (TimeoutError, aiohttp.ClientError):
            return error_response(502, "model replica failed while responding", "upstream_error"), "error"
        router.metrics.added_seconds.observe(added)
        return web.Response(status=upstream.status, body=data, headers=headers), _outcome(upstream.status)
    response = web.StreamResponse(status=upstream.status, headers=headers)
    try:
        await response.prepare(request)
    except ConnectionResetError:
        return response, "aborted"
    router.metrics.added_seconds.observe(added + time.perf_counter() - relay_started)
    outcome = _outcome(upstream.status)
    tail = b"\n\n"
    broken = False
    while not broken:
        try:
            chunk = await upstream.content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            outcome, broken = "error", True
            log.warning("replica stream ended abnormally: %s", type(exc).__name__)
            # close any half-sent event first, so the error is an event of its own
            chunk = (b"" if tail.endswith(b"\n\n") else b"\n\n") + _error_event("model replica stream ended abnormally")
        if not chunk:
            break
        claim.release()  # the first byte: this request's prefill is over
        tail = (tail + chunk)[-2:]
        try:
            await response.write(chunk)
        except ConnectionResetError:  # our client went away
            return response, "aborted"
    try:
        await response.write_eof()
    except ConnectionResetError:
        return response, "aborted"
    return response, outcome


def _outcome(status: int) -> str:
    return "ok" if status < 500 else "error"


async def handle_models(request: web.Request) -> web.StreamResponse:
    """GET /v1/models from any replica."""
    router = request.app[ROUTER_KEY]
    for url in router.fleet.urls():
        try:
            async with request.app[SESSION_KEY].get(
                url + "/v1/models", timeout=aiohttp.ClientTimeout(total=router.config.connect_timeout_seconds + 5)
            ) as upstream:
                return web.Response(
                    status=upstream.status, body=await upstream.read(), content_type=upstream.content_type
                )
        except (TimeoutError, aiohttp.ClientError):
            continue
    return error_response(503, "no ready model replicas behind this router", "service_unavailable")


async def handle_health(request: web.Request) -> web.Response:
    """Liveness: the router process serves."""
    return web.json_response({"status": "ok"})


async def handle_ready(request: web.Request) -> web.Response:
    """Readiness: at least one replica is known."""
    replicas = len(request.app[ROUTER_KEY].fleet)
    return web.json_response(
        {"status": "ok" if replicas else "no replicas", "replicas": replicas}, status=200 if replicas else 503
    )


async def handle_status(request: web.Request) -> web.Response:
    """GET /router/status: strategy, knobs, replicas and their in-flight counts."""
    return web.json_response(request.app[ROUTER_KEY].status())


async def handle_metrics(request: web.Request) -> web.Response:
    """Prometheus exposition of this router's registry."""
    router = request.app[ROUTER_KEY]
    router.metrics.index_entries.set(router.status()["indexEntries"] or 0)
    body = generate_latest(router.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start ``app`` with handler cancellation on (client disconnects cancel the handler)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
