"""Types of the proxy tests' fixtures (see conftest.py): a running simulated replica, a running router, factories."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from warmstart.router.proxying import TrafficServer
from warmstart.router.routing import Router
from warmstart.sim.server import SimReplica


@dataclass
class RunningReplica:
    replica: SimReplica
    url: str
    runner: web.AppRunner


@dataclass
class RunningRouter:
    router: Router
    url: str
    runner: TrafficServer
    admin_url: str
    admin_runner: web.AppRunner


SimFactory = Callable[..., Awaitable[list[RunningReplica]]]
RouterFactory = Callable[..., Awaitable[RunningRouter]]
