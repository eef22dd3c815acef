"""The HTTP reverse proxy: read and check the request, wait for a free slot, ask the router for candidates, relay.

One ``aiohttp.ClientSession`` lives for the application's lifetime (``cleanup_ctx``). Each
forwarded request holds one in-flight slot on its replica, taken just before the upstream call
and released in exactly one ``finally`` - whatever happens: success, client disconnect (the
server runs with handler cancellation on), timeout, or a backend that dies mid-stream.
Prompts are never logged; only sizes, hashes and outcomes are. ``/metrics`` and
``/router/status`` are served on the admin port (:mod:`warmstart.router.admin`), not here.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from yarl import URL

from warmstart.router.admission import QueueFull
from warmstart.router.bodies import BadBody, BodyParser
from warmstart.router.headers import upstream_request_headers
from warmstart.router.reading import BodyRefused, ByteBudget, read_body
from warmstart.router.relaying import PrefillClaim, Relay, error_response
from warmstart.router.routing import Routed, Router

log = logging.getLogger(__name__)

ROUTER_KEY: web.AppKey[Router] = web.AppKey("router", Router)
SESSION_KEY: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
PARSER_KEY: web.AppKey[BodyParser] = web.AppKey("parser", BodyParser)
BUDGET_KEY: web.AppKey[ByteBudget] = web.AppKey("budget", ByteBudget)

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", "/invocations")

#: Seconds a client is asked to wait (``Retry-After``) after an overflow or a full byte budget.
RETRY_AFTER_SECONDS = 1


def make_app(router: Router) -> web.Application:
    """The router's traffic application (the caller adds discovery tasks to ``cleanup_ctx``)."""
    app = web.Application(client_max_size=1024**3)  # the body limit is enforced per request below
    app[ROUTER_KEY] = router
    app[PARSER_KEY] = BodyParser()
    app[BUDGET_KEY] = ByteBudget(router.config.max_buffered_bytes)
    app.cleanup_ctx.append(_client_session)
    for path in GENERATE_PATHS:
        app.router.add_post(path, handle_generate)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/ready", handle_ready)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=30, keepalive_timeout=30)
    # auto_decompress off: replies pass back byte for byte, Content-Encoding included; no cookie
    # jar: a replica's Set-Cookie goes back to its client and is never replayed to other clients
    # (filtering a jar also cost CPU on every request)
    session = aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())
    app[SESSION_KEY] = session
    yield
    await session.close()
    app[PARSER_KEY].close()


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
    budget = request.app[BUDGET_KEY]
    budget.limit = config.max_buffered_bytes
    try:
        held = await read_body(request, config.max_body_bytes, config.body_timeout_seconds, budget)
    except BodyRefused as refused:
        router.metrics.request(strategy, "", "bad_request").inc()
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)} if refused.status == 503 else None
        response = error_response(refused.status, refused.message, refused.kind, retry)
        response.force_close()  # the rest of the body is not read: this connection is done
        return response
    try:
        raw = held.data()
        try:
            parsed = await request.app[PARSER_KEY].parse(
                raw, config.block_chars * config.max_blocks, config.session_field
            )
        except BadBody as bad:
            router.metrics.request(strategy, "", "bad_request").inc()
            return error_response(400, str(bad), "invalid_request_error")
        session_key = request.headers.get(config.session_header) or parsed.session
        try:
            await router.admission.admit(config.max_queue_size)
        except QueueFull:
            router.metrics.overflows.inc()
            router.metrics.request(strategy, "", "overflow").inc()
            return error_response(
                config.overflow_status_code,
                "every model replica is at its concurrency limit and the queue is full; retry later",
                "overloaded",
                {"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        # no await between admission and taking the slot in _forward
        routed = router.decide(parsed, session_key)
        if not routed.decision.candidates:
            router.metrics.request(strategy, "", "no_replica").inc()
            return error_response(503, "no ready model replicas behind this router", "service_unavailable")
        return await _forward(request, router, routed, raw, started)
    finally:
        held.release()


@functools.lru_cache(maxsize=16)
def _timeout(connect: float, read: float) -> aiohttp.ClientTimeout:
    """The upstream timeouts (one object per setting, not one per request)."""
    return aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect, sock_read=read)


@functools.lru_cache(maxsize=4096)
def _upstream_url(base: str, path: str) -> URL:
    """``base + path`` parsed once: replicas x the few generate paths (query strings are not cached)."""
    return URL(base + path)


async def _forward(
    request: web.Request, router: Router, routed: Routed, raw: bytes, started: float
) -> web.StreamResponse:
    """Send to the first candidate under the cap; on connection refused, retry once on the next."""
    config = router.config
    strategy = router.policy.strategy.value
    session = request.app[SESSION_KEY]
    timeout = _timeout(config.connect_timeout_seconds, config.read_timeout_seconds)
    headers = upstream_request_headers(request.headers.items(), request.remote)
    cap = config.max_concurrent_requests
    attempts = [url for url in routed.decision.candidates[: 1 + config.retries]]
    for attempt, url in enumerate(attempts):
        replica = router.fleet.get(url)
        if replica is None or (cap is not None and replica.inflight >= cap):
            continue  # removed between decision and send, or full (the cap is hard)
        last = attempt == len(attempts) - 1
        router.policy.placed(url, routed.key)
        router.metrics.placement(router.placement(replica)).inc()
        replica.inflight += 1
        replica.served += 1
        router.metrics.inflight_of(url).set(replica.inflight)
        matched_chars = routed.decision.matched_blocks * config.block_chars if attempt == 0 else 0
        claim = PrefillClaim(replica, max(0, routed.key.chars - matched_chars))
        outcome = "aborted"
        try:
            pre = time.perf_counter()
            try:
                target = URL(url + request.path_qs) if request.query_string else _upstream_url(url, request.path)
                upstream = await session.post(target, data=raw, headers=headers, timeout=timeout)
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
            try:
                relay = Relay(router.metrics, replica, claim, started)
                response, outcome = await relay.run(request, upstream, pre - started)
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
            router.admission.wake()
    return error_response(503, "no ready model replicas behind this router", "service_unavailable")


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


async def serve(app: web.Application, host: str, port: int, header_timeout: float = 15.0) -> tuple[web.AppRunner, int]:
    """Start ``app`` with handler cancellation on (client disconnects cancel the handler).

    ``header_timeout`` bounds how long a connection may take to send a request's headers, from
    its opening or from the previous response (aiohttp's keep-alive timer, which also runs while
    a request head is incomplete); it also closes idle keep-alive connections.
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, keepalive_timeout=header_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
