"""The HTTP reverse proxy: check the request, wait for a free slot, ask the router for candidates, relay.

The traffic port is served by :mod:`warmstart.router.httpserver` (which holds bodies under the
size limit, deadlines and byte budget before this module sees them); replicas are reached over
the keep-alive connections of :mod:`warmstart.router.upstream`. Each forwarded request holds one
in-flight slot on its replica, taken just before the upstream call and released in exactly one
``finally`` - whatever happens: success, client disconnect (it cancels the handler), timeout, or
a backend that dies mid-stream. Prompts are never logged; only sizes, hashes and outcomes are.
``/metrics`` and ``/router/status`` are served on the admin port (:mod:`warmstart.router.admin`).
"""

from __future__ import annotations

import json
import logging
import time

from warmstart.router import forwarding, httpserver, reading, upstream
from warmstart.router.admission import QueueFull
from warmstart.router.bodies import BadBody, BodyParser
from warmstart.router.forwarding import Origin, TrustedProxies
from warmstart.router.headers import forwarded_request_headers
from warmstart.router.httpserver import Connection, Headers, Request, json_body
from warmstart.router.reading import ByteBudget
from warmstart.router.relaying import PrefillClaim, Relay
from warmstart.router.routing import Routed, Router

log = logging.getLogger(__name__)

GENERATE_PATHS = frozenset({b"/v1/completions", b"/v1/chat/completions", b"/invocations"})

#: Seconds a client is asked to wait (``Retry-After``) after an overflow or a full byte budget.
RETRY_AFTER_SECONDS = httpserver.RETRY_AFTER_SECONDS
_RETRY_AFTER = [(b"Retry-After", str(RETRY_AFTER_SECONDS).encode())]


def error(connection: Connection, status: int, message: str, kind: str, retry: bool = False) -> None:
    """Answer an OpenAI-style JSON error."""
    connection.respond(status, json_body(status, message, kind), _RETRY_AFTER if retry else ())


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    mime = content_type.split(b";", 1)[0].strip().lower()
    return mime == b"application/json" or mime.endswith(b"+json")


class TrafficApp:
    """The traffic port's application: the generate paths, ``/v1/models``, ``/health`` and ``/ready``."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.budget = reading.configured(router.config)
        self.parser = BodyParser()
        self.pool = upstream.Pool()
        self._trusted_from: tuple[str, ...] = ()
        self._trusted = TrustedProxies()

    async def close(self) -> None:
        self.pool.close()
        self.parser.close()

    def body_limits(self) -> tuple[int, float]:
        config = self.router.config
        reading.configured(config, self.budget)
        return config.max_body_bytes, config.body_timeout_seconds

    def origin(self, peer: str | None, headers: Headers) -> Origin:
        trusted_from = self.router.config.trusted_proxies
        if trusted_from != self._trusted_from:  # parsed once per configuration, not per request
            self._trusted_from, self._trusted = trusted_from, TrustedProxies(trusted_from)
        if not self._trusted:
            return Origin(peer)
        forwarded_for = [value for key, value in headers if key == b"x-forwarded-for"]
        return forwarding.origin(peer, forwarded_for, self._trusted)

    def write_timeout(self) -> float:
        return self.router.config.write_timeout_seconds

    def refused(self, status: int) -> None:
        self.router.metrics.request(self.router.policy.strategy.value, "", "bad_request").inc()

    async def handle(self, request: Request, connection: Connection) -> None:
        path = request.path
        if path in GENERATE_PATHS:
            if request.method != b"POST":
                return error(connection, 405, "method not allowed", "invalid_request_error")
            return await self.generate(request, connection)
        if request.method not in (b"GET", b"HEAD"):
            known = path in (b"/v1/models", b"/health", b"/healthz", b"/ready")
            return error(connection, 405 if known else 404, "not found", "invalid_request_error")
        if path in (b"/health", b"/healthz"):
            return connection.respond(200, b'{"status": "ok"}')
        if path == b"/ready":
            replicas = len(self.router.fleet)
            body = json.dumps({"status": "ok" if replicas else "no replicas", "replicas": replicas}).encode()
            return connection.respond(200 if replicas else 503, body)
        if path == b"/v1/models":
            return await self.models(connection)
        return error(connection, 404, "not found", "invalid_request_error")

    async def generate(self, request: Request, connection: Connection) -> None:
        """POST /v1/completions, /v1/chat/completions, /invocations."""
        started = time.perf_counter()
        router = self.router
        config = router.config
        strategy = router.policy.strategy.value
        if not _is_json(request.header(b"content-type")):
            router.metrics.request(strategy, "", "bad_request").inc()
            return error(connection, 415, "content type must be application/json", "invalid_request_error")
        raw = request.body.data()
        try:
            parsed = await self.parser.parse(
                raw, config.block_chars * config.max_blocks, config.session_field, request.origin.client
            )
        except BadBody as bad:
            router.metrics.request(strategy, "", "bad_request").inc()
            return error(connection, 400, str(bad), "invalid_request_error")
        session_value = request.header(config.session_header.lower().encode())
        session_key = session_value.decode("latin-1") if session_value else parsed.session
        try:
            await router.admission.admit(config.max_queue_size)
        except QueueFull:
            router.metrics.overflows.inc()
            router.metrics.request(strategy, "", "overflow").inc()
            return error(
                connection,
                config.overflow_status_code,
                "every model replica is at its concurrency limit and the queue is full; retry later",
                "overloaded",
                retry=True,
            )
        # no await between admission and taking the slot in _forward
        routed = router.decide(parsed, session_key)
        if not routed.decision.candidates:
            router.metrics.request(strategy, "", "no_replica").inc()
            return error(connection, 503, "no ready model replicas behind this router", "service_unavailable")
        await self._forward(request, connection, routed, raw, started)

    async def _forward(
        self, request: Request, connection: Connection, routed: Routed, raw: bytes, started: float
    ) -> None:
        """Send to the first candidate under the cap; on connection refused, retry once on the next."""
        router = self.router
        config = router.config
        strategy = router.policy.strategy.value
        headers = forwarded_request_headers(request.headers, request.peer, request.origin.hops)
        cap = config.max_concurrent_requests
        attempts = routed.decision.candidates[: 1 + config.retries]
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
                _, _, host, prefix = upstream.address(url)
                head = upstream.request_head(b"POST", prefix + request.target, host, headers, len(raw))
                try:
                    replica_connection, exchange = await self.pool.start(
                        url, head, raw, config.connect_timeout_seconds, config.read_timeout_seconds
                    )
                except upstream.ConnectFailed:
                    outcome = "refused"
                    log.warning("replica %s refused the connection (attempt %d)", url, attempt + 1)
                    if last:
                        return error(connection, 502, "model replica refused the connection", "upstream_error")
                    continue
                except (TimeoutError, upstream.UpstreamFailed) as exc:
                    outcome = "error"
                    log.warning("replica %s failed before responding: %s", url, type(exc).__name__)
                    return error(connection, 502, "model replica failed before responding", "upstream_error")
                try:
                    relay = Relay(router.metrics, replica, claim, started)
                    outcome = await relay.run(request, connection, replica_connection, exchange, pre - started)
                finally:
                    if outcome == "ok":
                        self.pool.release(replica_connection)
                    else:  # do not reuse a connection whose response was not read to the end
                        replica_connection.close()
                return None
            finally:
                claim.release()
                replica.inflight -= 1
                if router.fleet.get(url) is replica:
                    router.metrics.inflight_of(url).set(replica.inflight)
                router.metrics.request(strategy, url, outcome).inc()
                router.admission.wake()
        return error(connection, 503, "no ready model replicas behind this router", "service_unavailable")

    async def models(self, connection: Connection) -> None:
        """GET /v1/models from any replica."""
        timeout = self.router.config.connect_timeout_seconds
        for url in self.router.fleet.urls():
            _, _, host, prefix = upstream.address(url)
            head = upstream.request_head(b"GET", prefix + b"/v1/models", host, [], None)
            try:
                replica_connection, exchange = await self.pool.start(url, head, b"", timeout, timeout + 5)
                try:
                    await exchange.done
                finally:
                    self.pool.release(replica_connection)
            except (TimeoutError, OSError, upstream.UpstreamFailed):
                continue
            content_type = b"application/json" if exchange.content_type is None else exchange.content_type
            return connection.respond(exchange.status, exchange.body(), content_type=content_type)
        return error(connection, 503, "no ready model replicas behind this router", "service_unavailable")


class TrafficServer:
    """The running traffic port: its server, application and port."""

    def __init__(self, server: httpserver.Server, app: TrafficApp) -> None:
        self.server, self.app = server, app

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def budget(self) -> ByteBudget:
        return self.app.budget

    async def cleanup(self) -> None:
        await self.server.close()
        await self.app.close()


async def serve(router: Router, host: str, port: int, header_timeout: float = 15.0) -> TrafficServer:
    """Serve ``router``'s traffic on ``host:port`` (0 = any free port).

    ``header_timeout`` bounds how long a connection may take to send a request's headers, from
    its opening or from the previous response; it also closes idle keep-alive connections.
    """
    app = TrafficApp(router)
    return TrafficServer(await httpserver.serve(app, host, port, header_timeout), app)
