"""Wire an engine's KV-cache events for the router: vLLM's ``--kv-events-config`` and its ports, or why not.

With ``intelligentRoutingSpec.routerConfig.kvEvents: true`` the router follows every model pod's
KV events. The operator adds vLLM's flag to the model container when it understands the command:

* ``vllm serve ...`` (as ``command`` or as the leading ``args``), or ``python -m
  vllm.entrypoints.openai.api_server``;
* no command and an image whose repository name contains ``vllm`` (vLLM's images start ``vllm
  serve``; the args are its flags);
* ``warmstart sim`` (the simulator speaks the same flag).

It then appends ``--kv-events-config`` with the publisher bound on the KV-event port and the replay
socket on the replay port, and declares both ports (``kv-events``, ``kv-replay``). A command that
already passes ``--kv-events-config`` is left as it is. Any other command is never rewritten: the
endpoint gets a ``KVEventsNotWired`` condition saying why, and the router routes its replicas by
its text index and their reported load. Pure functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from warmstart.api.routers import RouterConfig
from warmstart.render.endpoints import Endpoint

FLAG = "--kv-events-config"
PORT_NAME = "kv-events"
REPLAY_PORT_NAME = "kv-replay"


@dataclass(frozen=True)
class Wiring:
    """The model container's changes, or the reason there are none."""

    args: list[str] | None = None
    """The container's args with the flag added (None: unchanged)."""
    ports: tuple[tuple[str, int], ...] = ()
    """Ports to declare: (name, number)."""
    reason: str | None = None
    """Why the command was not wired (for the endpoint's condition), or None."""


def _vllm(command: list[str], args: list[str], image: str) -> bool:
    words = [*command, *args][:4]
    joined = " ".join(words)
    if "vllm.entrypoints.openai.api_server" in joined:
        return True
    for position, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "vllm" and words[position + 1] == "serve":
            return True
        if word.rsplit("/", 1)[-1] == "warmstart" and words[position + 1] == "sim":
            return True
    if not command:
        repository = image.rsplit("@", 1)[0].rsplit(":", 1)[0] if "/" in image else image.split(":", 1)[0]
        if "vllm" in repository.rsplit("/", 1)[-1]:
            return True
        if args[:1] == ["sim"] and "warmstart" in repository:
            return True
    return False


def events_config(config: RouterConfig) -> str:
    """The flag's JSON: publisher bound on every address, replay socket when a replay port is set."""
    value: dict[str, object] = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{config.kv_events_port}",
    }
    if config.kv_events_replay_port is not None:
        value["replay_endpoint"] = f"tcp://*:{config.kv_events_replay_port}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def wiring(command: list[str] | None, args: list[str] | None, image: str, config: RouterConfig) -> Wiring:
    """How to make this model container publish its KV events for the router."""
    if not config.kv_events:
        return Wiring()
    command, args = list(command or []), list(args or [])
    ports: list[tuple[str, int]] = [(PORT_NAME, config.kv_events_port)]
    if config.kv_events_replay_port is not None:
        ports.append((REPLAY_PORT_NAME, config.kv_events_replay_port))
    if any(word == FLAG or word.startswith(FLAG + "=") for word in [*command, *args]):
        return Wiring(ports=tuple(ports))
    if not _vllm(command, args, image):
        return Wiring(
            reason="kvEvents is on, but the model container's command is not one the operator understands "
            f"(vllm serve, python -m vllm.entrypoints.openai.api_server, warmstart sim), so {FLAG} was not added; "
            f"add {FLAG} yourself (publisher on port {config.kv_events_port}) or the router routes these "
            "replicas by request text and their reported load"
        )
    return Wiring(args=[*args, FLAG, events_config(config)], ports=tuple(ports))


def knobs(endpoint: Endpoint) -> RouterConfig:
    """The event settings the endpoint chose (defaults elsewhere); ``kvEvents`` only counts with a router."""
    chosen = endpoint.routing.router_config if endpoint.routing and endpoint.routing.router_config else None
    config = RouterConfig.model_validate(chosen.chosen() if chosen else {})
    return config if endpoint.routing_enabled else config.model_copy(update={"kv_events": False})


def of(endpoint: Endpoint) -> Wiring:
    """The wiring of this endpoint's model container."""
    worker = endpoint.worker
    return wiring(worker.command, worker.args, worker.image, knobs(endpoint))
