"""The admin application: ``/metrics`` and ``/router/status`` on a port the traffic Service does not expose.

Clients of the endpoint reach only the traffic port (:mod:`warmstart.router.proxying`); the
router's internals (replica addresses, knobs, counters) are for Prometheus and operators, who
reach the admin port on the pod (scrape, ``kubectl port-forward``).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from warmstart.router.routing import Router

ROUTER_KEY: web.AppKey[Router] = web.AppKey("router", Router)


def make_admin_app(router: Router) -> web.Application:
    """``/metrics``, ``/router/status``, and ``/health`` for checks against this port."""
    app = web.Application()
    app[ROUTER_KEY] = router
    app.router.add_get("/router/status", handle_status)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/health", handle_health)
    return app


async def handle_status(request: web.Request) -> web.Response:
    """GET /router/status: strategy, knobs, replicas and their in-flight counts, queue, config errors."""
    return web.json_response(request.app[ROUTER_KEY].status())


async def handle_metrics(request: web.Request) -> web.Response:
    """Prometheus exposition of this router's registry."""
    router = request.app[ROUTER_KEY]
    router.metrics.index_entries.set(router.status()["indexEntries"] or 0)
    body = generate_latest(router.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def handle_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start an aiohttp ``app`` (the admin port) with handler cancellation on; (runner, port)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
