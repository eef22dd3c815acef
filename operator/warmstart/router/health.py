"""The endpoint picker's gRPC health services: ``liveness``, ``readiness`` and the ext_proc service's name.

``liveness`` is SERVING while the process answers. ``readiness``, the overall service ``""`` and
the ext_proc service name are SERVING while the router knows at least one replica and the
optional readiness gate (for example a leader elector's "this replica leads") returns true.
grpcio-health-checking's servicer does the protocol (``Check`` and ``Watch``); this module keeps
its statuses current: before every ``Check``, and every ``interval`` seconds for watchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from warmstart.router.routing import Router

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS = "readiness"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Health(health_aio.HealthServicer):  # type: ignore[misc]
    """Health statuses derived from the router's fleet and a readiness gate."""

    def __init__(
        self,
        router: Router,
        ready: Callable[[], bool] | None = None,
        services: tuple[str, ...] = (),
        interval: float = 1.0,
    ) -> None:
        super().__init__()
        self.router, self.ready, self.interval = router, ready, interval
        self.gated = ("", READINESS, *services)
        """The services that follow readiness (liveness does not)."""
        self._task: asyncio.Task[None] | None = None

    def is_ready(self) -> bool:
        if len(self.router.fleet) == 0:
            return False
        if self.ready is None:
            return True
        try:
            return bool(self.ready())
        except Exception:
            log.exception("readiness gate failed")
            return False

    async def refresh(self) -> None:
        await self.set(LIVENESS, SERVING)
        status = SERVING if self.is_ready() else NOT_SERVING
        for service in self.gated:
            await self.set(service, status)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        await self.refresh()
        return await super().Check(request, context)

    def add_to(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self, server)

    def start(self) -> None:
        """Keep the statuses current for ``Watch`` streams."""
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def shutdown(self) -> None:
        """Stop following and report NOT_SERVING everywhere (the picker is going away)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.enter_graceful_shutdown()
