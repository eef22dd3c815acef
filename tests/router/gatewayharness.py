"""A GIE gateway for tests: the real Envoy in front of warmstart's endpoint picker (in this process) and sim replicas.

The picker is the router's own ``extproc`` server over a real :class:`Router`, so a test reads the picker's
accounting (``Router.status()``) directly. Its pick lists are recorded as it sends them (a spy that calls through to
the real ``replies.picked``), so a test compares each pick with the replica that says it served the request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envoyprocess import RunningEnvoy, address_of, envoy_process
from warmstart.api.routers import RouterConfig
from warmstart.render.envoy_gateway import Address, FailureMode, GatewaySpec
from warmstart.router import extproc, replies
from warmstart.router.routing import Router


@dataclass
class Gateway:
    envoy: RunningEnvoy
    router: Router
    picker: extproc.PickerServer
    picks: list[str] = field(default_factory=list)
    """The pick lists the picker sent (``ip:port[,ip:port...]``), in order."""

    @property
    def url(self) -> str:
        return self.envoy.url

    def served(self) -> dict[str, int]:
        """The picker's accounting: requests counted per replica URL."""
        return {r["url"]: r["served"] for r in self.router.status()["backends"]}

    def inflight(self) -> int:
        return int(self.router.status()["inflight"])

    async def settled_inflight(self, attempts: int = 200) -> int:
        """Requests the picker still holds once they settle: it may release a slot just after the client has the
        response's end (the release rides on the response's last message), so wait for 0 (up to ``attempts``
        event-loop turns of 50 ms); the count it settles at otherwise."""
        for _ in range(attempts):
            if self.inflight() == 0:
                return 0
            await asyncio.sleep(0.05)
        return self.inflight()


@contextlib.asynccontextmanager
async def gateway(
    backends: Sequence[str],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: RouterConfig | None = None,
    failure_mode: FailureMode = "FailClose",
    fallback: Sequence[str] = (),
    subset_hint: Sequence[str] | None = None,
    message_timeout_s: float = 10.0,
) -> AsyncIterator[Gateway]:
    """Envoy on a rendered GIE bootstrap, asking a picker over ``backends``; both stopped after."""
    router = Router(config or RouterConfig.model_validate({"strategy": "prefixaware"}), list(backends))
    router.start()
    picker = await extproc.serve(router, "127.0.0.1", 0)
    picks: list[str] = []
    real = replies.picked

    def recording(value: str, *args: Any, **kwargs: Any) -> Any:
        picks.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(replies, "picked", recording)
    spec = GatewaySpec(
        picker=Address("127.0.0.1", picker.port),
        failure_mode=failure_mode,
        fallback=[address_of(url) for url in fallback],
        subset_hint=subset_hint,
        message_timeout_s=message_timeout_s,
    )
    try:
        async with envoy_process(spec, workdir) as envoy:
            yield Gateway(envoy, router, picker, picks)
    finally:
        await picker.stop(grace=1.0)
        await router.stop()
