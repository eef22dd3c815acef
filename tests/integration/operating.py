"""Run the real warmstart operator in-process (a thread with its own event loop) against the real control plane.

Nothing is faked: kopf watches the API server, handlers call it with the real client. Each test restricts the
operator to its own namespaces, so tests (and developers sharing one cluster) never fight over objects.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from warmstart.controllers import running
from warmstart.controllers.settings import OperatorSettings
from warmstart.render.context import RenderContext


@contextmanager
def operator(
    kubeconfig: str, namespaces: list[str], *, render: dict[str, Any] | None = None, **settings: Any
) -> Iterator[OperatorSettings]:
    """Start the operator, wait until it is ready, yield its settings, then stop it cleanly."""
    merged: dict[str, Any] = {
        "namespaces": namespaces,
        "metrics_port": 0,
        "health_port": 0,
        "resync_seconds": 2.0,
        **settings,
    }
    config = OperatorSettings(render=RenderContext(**(render or {})), **{k: v for k, v in merged.items()})
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(running.run(config, kubeconfig=kubeconfig, stop_flag=stop, ready_flag=ready))
        except BaseException as error:  # noqa: BLE001 - surfaced in the test thread below
            failure.append(error)
        finally:
            ready.set()

    thread = threading.Thread(target=target, name="warmstart-operator", daemon=True)
    thread.start()
    if not ready.wait(60) or failure:
        raise RuntimeError(f"operator did not start: {failure}")
    try:
        yield config
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)
        if thread.is_alive():
            raise RuntimeError("operator did not stop within 60 s")
