"""An OpenAI-compatible HTTP face for one simulated replica, with vLLM's metric names.

Serves ``/v1/completions``, ``/v1/chat/completions`` (both with ``stream: true`` as SSE),
``/invocations``, ``/v1/models``, ``/health``, ``/metrics`` and ``POST /reset_prefix_cache``.
Responses carry ``usage.prompt_tokens_details.cached_tokens``, and every response id starts
with ``cmpl-<replica>-`` (also the ``x-sim-replica`` header) so a benchmark can tell which
replica served it through any router. :meth:`SimReplica.crash` cuts every open connection,
like a pod that dies mid-stream.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from warmstart.router.tokenizing import ModelTokenizer
from warmstart.sim.engine import Engine, EngineParams
from warmstart.sim.kvpublishing import CacheEvents, Publisher

#: Tokens of a prompt the sim tokenizes (all of them).
_ALL = 1 << 40
Tokens = tuple[int, ...] | None

_WORDS = ("the", "and", "for", "you", "can", "not", "but", "all", "any", "one", "out", "use", "new", "now", "way")


def render_prompt(body: dict[str, Any]) -> str:
    """What the engine tokenizes: the prompt, or the messages in a simple chat template."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for message in messages:
            if isinstance(message, dict):
                content = message.get("content")
                if isinstance(content, list):
                    content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                parts.append(f"<|{message.get('role', '')}|>\n{content}\n")
        return "".join(parts) + "<|assistant|>\n"
    prompt = body.get("prompt", body.get("inputs", ""))
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    return str(prompt)


def _output_tokens(prompt: str, count: int) -> list[str]:
    rng = random.Random(hash(prompt))
    return [rng.choice(_WORDS) + " " for _ in range(count)]  # ~4 chars per token


class _EngineCollector(Collector):
    """Exports the engine's live counters under vLLM's names."""

    def __init__(self, replica: SimReplica) -> None:
        self.replica = replica

    def collect(self) -> Any:
        name, counters, engine = self.replica.name, self.replica.engine.counters, self.replica.engine
        for metric, doc, value in (
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", counters.prefix_queries),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", counters.prefix_hits),
            ("vllm:prompt_tokens", "Prompt tokens processed.", counters.prompt_tokens),
            ("vllm:generation_tokens", "Tokens generated.", counters.generation_tokens),
            ("vllm:request_success", "Requests admitted.", counters.requests),
        ):
            family = CounterMetricFamily(metric, doc, labels=["model_name"])
            family.add_metric([name], value)
            yield family
        usage = len(engine.cache) / engine.cache.capacity_blocks
        gauges: tuple[tuple[str, str, float], ...] = (
            ("vllm:num_requests_running", "Sequences running.", engine.running),
            ("vllm:num_requests_waiting", "Sequences waiting for a slot.", engine.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage (1 = full).", usage),
        )
        for gauge_name, gauge_doc, gauge_value in gauges:
            gauge = GaugeMetricFamily(gauge_name, gauge_doc, labels=["model_name"])
            gauge.add_metric([name], gauge_value)
            yield gauge


class SimReplica:
    """One simulated vLLM replica: engine + aiohttp application."""

    def __init__(
        self,
        name: str,
        params: EngineParams | None = None,
        stream_chunk_tokens: int = 1,
        model: str = "sim-llm",
        tokenizer: ModelTokenizer | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        """The model's tokenizer (token ids and counts); without it, the sim's 4-characters-per-token one."""
        self.publisher = publisher
        """Where the KV-cache events go (vLLM's ``--kv-events-config``), if anywhere."""
        params = params or EngineParams()
        listener = CacheEvents(publisher, params.block_tokens) if publisher is not None else None
        self.engine = Engine(params, listener)
        self.stream_chunk_tokens = max(1, stream_chunk_tokens)
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(self))
        self.http_requests = Counter("sim_http_requests", "HTTP requests by path.", ["path"], registry=self.registry)
        self.open_requests = Gauge("sim_open_requests", "Requests being served.", registry=self.registry)
        self._ids = itertools.count(1)
        self._open: dict[int, web.BaseRequest] = {}
        self.ready = True
        """False while the replica still loads its weights: /health answers 503, as vLLM does before it serves."""
        self.app = self._make_app()

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for path in ("/v1/completions", "/v1/chat/completions", "/invocations"):
            app.router.add_post(path, self.handle_generate)
        app.router.add_get("/v1/models", self.handle_models)
        app.router.add_get("/health", self.handle_health)
        app.router.add_get("/metrics", self.handle_metrics)
        app.router.add_post("/reset_prefix_cache", self.handle_reset)
        return app

    def crash(self) -> int:
        """Cut every open connection mid-response (a dying pod); returns how many were cut."""
        cut = 0
        for request in list(self._open.values()):
            if request.transport is not None:
                request.transport.abort()
                cut += 1
        return cut

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        self.http_requests.labels(request.path).inc()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "invalid JSON", "code": 400}}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body must be an object", "code": 400}}, status=400)
        chat = request.path.endswith("/chat/completions")
        prompt = render_prompt(body)
        token_ids = self.tokenizer.request_tokens(request.path, body, _ALL) if self.tokenizer is not None else None
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        rid = f"cmpl-{self.name}-{next(self._ids)}"
        self._open[id(request)] = request
        self.open_requests.inc()
        try:
            if body.get("stream"):
                return await self._stream(request, body, chat, prompt, token_ids, max_tokens, rid)
            return await self._complete(body, chat, prompt, token_ids, max_tokens, rid)
        finally:
            self._open.pop(id(request), None)
            self.open_requests.dec()

    async def _complete(
        self, body: dict[str, Any], chat: bool, prompt: str, token_ids: Tokens, max_tokens: int, rid: str
    ) -> web.Response:
        async with self.engine.sequence(prompt, token_ids) as admitted:
            await self.engine.sleep((max_tokens - 1) / self.engine.params.decode_tokens_per_s)
            self.engine.counters.generation_tokens += max_tokens
        text = "".join(_output_tokens(prompt, max_tokens))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, logprobs=None)
        payload = {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": self._usage(admitted.prompt_tokens, admitted.cached_tokens, max_tokens),
        }
        return web.json_response(payload, headers={"x-sim-replica": self.name})

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        chat: bool,
        prompt: str,
        token_ids: Tokens,
        max_tokens: int,
        rid: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "x-sim-replica": self.name}
        )
        await response.prepare(request)
        created, model = int(time.time()), body.get("model", self.model)
        tokens = _output_tokens(prompt, max_tokens)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(text: str, finish: str | None, ttft_s: float | None = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = ({"role": "assistant"} if ttft_s is not None else {}) | {"content": text}
            else:
                choice.update(text=text, logprobs=None)
            obj = "chat.completion.chunk" if chat else "text_completion"
            data: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
            if ttft_s is not None:  # the engine's own TTFT in model seconds (lets a benchmark unscale it)
                data["sim_ttft_s"] = round(ttft_s, 6)
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        async with self.engine.sequence(prompt, token_ids) as admitted:
            await response.write(chunk(tokens[0], "length" if max_tokens == 1 else None, admitted.ttft_s))
            sent = 1
            while sent < max_tokens:
                step = min(self.stream_chunk_tokens, max_tokens - sent)
                await self.engine.sleep(step / self.engine.params.decode_tokens_per_s)
                sent += step
                text = "".join(tokens[sent - step : sent])
                await response.write(chunk(text, "length" if sent >= max_tokens else None))
            self.engine.counters.generation_tokens += max_tokens
        if include_usage:
            usage = {
                "id": rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [],
                "usage": self._usage(admitted.prompt_tokens, admitted.cached_tokens, max_tokens),
            }
            await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    @staticmethod
    def _usage(prompt_tokens: int, cached: int, completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    async def handle_models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "warmstart-sim"}]}
        )

    async def handle_health(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503, text="loading weights")
        return web.Response(text="")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def handle_reset(self, request: web.Request) -> web.Response:
        self.engine.reset()
        return web.json_response({"status": "ok"})


async def serve(replica: SimReplica, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start one replica; handler cancellation frees its slot when a client goes away."""
    runner = web.AppRunner(replica.app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
