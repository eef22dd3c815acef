"""The API server's readiness and discovery: what kopf saw at start against what the server serves now."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import kopf


async def wait_for_api_server(api: Any, interval: float = 1.0) -> None:
    """Return once the API server answers /readyz with 200.

    kopf resolves the resources it serves once, from the discovery it reads at start, and re-resolves only when a CRD
    changes. An API server that is still starting (a restart, an upgrade) serves a discovery without some groups
    (batch, the CRDs): an operator started then would never watch them, while its liveness probe stays green.
    """
    attempts = 0
    while True:
        try:  # the client raises on any status but 2xx
            await asyncio.to_thread(
                api.call_api,
                "/readyz",
                "GET",
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=5,
            )
            return
        except Exception:  # noqa: BLE001 - connection refused, TLS, 5xx: all mean "not yet"
            pass
        attempts += 1
        if attempts % 30 == 1:
            logging.getLogger(__name__).info("waiting for the API server to be ready (/readyz)")
        await asyncio.sleep(interval)


def unresolved(operator_registry: kopf.OperatorRegistry, insights: Any) -> list[Any]:
    """Selectors of the registry's handlers that the discovery kopf read did not resolve (kopf never serves them)."""
    found = insights.watched_resources | insights.indexed_resources
    selectors = {
        handler.selector
        for handlers in (operator_registry._indexing, operator_registry._watching, operator_registry._changing)
        for handler in handlers.get_all_handlers()
        if handler.selector is not None
    }
    return [s for s in selectors if not s.select(found)]


def served(api: Any, selector: Any) -> bool:
    """Whether the API server's discovery now lists the resource `selector` names (group, version, plural)."""
    name = selector.plural or selector.any_name
    if not isinstance(name, str) or selector.version is None:
        return False
    path = f"/apis/{selector.group}/{selector.version}" if selector.group else f"/api/{selector.version}"
    try:
        response = api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=5)
        listed = json.loads(response.data)
    except Exception:  # noqa: BLE001 - not served (404) or not reachable: either way not now
        return False
    return any(r.get("name") == name for r in listed.get("resources") or [])
