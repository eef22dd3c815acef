"""The real engine's endpoint and a small client for it: examples/09-llamacpp adapted to a cluster, and one timed
request that reads back what llama.cpp's server reports about its prompt cache.

The manifest function is pure. :func:`ask` streams one OpenAI completion and measures the time to its first token;
the last event's ``timings`` carries the engine's own counts: ``prompt_n`` tokens computed, ``cache_n`` reused.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

Manifest = dict[str, Any]

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "09-llamacpp" / "inference-endpoint-config.yaml"
PORT = 8000


def endpoint(
    base: Manifest,
    *,
    namespace: str,
    instance_type: str,
    bucket: str,
    prefix: str,
    s3_url: str,
    region: str,
    image: str,
    host_path: str,
    replicas: int = 1,
) -> Manifest:
    """``base`` (examples/09-llamacpp) pointed at a cluster: its node type, the GGUF in its S3 server, the cache under
    ``host_path`` and the engine image as pushed there. Everything else, the engine's flags included, is the example's.
    """
    manifest = copy.deepcopy(base)
    manifest["metadata"]["namespace"] = namespace
    spec = manifest["spec"]
    spec["instanceType"] = instance_type
    spec["replicas"] = replicas
    spec["modelSourceConfig"]["s3Storage"] = {"bucketName": bucket, "region": region, "endpointUrl": s3_url}
    spec["modelSourceConfig"]["modelLocation"] = prefix
    spec["modelCacheConfig"]["weightsCache"]["hostPath"] = host_path
    spec["worker"]["image"] = image
    return manifest


def flag_value(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` in llama-server's arguments (it takes ``--flag value``, never ``--flag=value``)."""
    found = [str(args[i + 1]) for i, arg in enumerate(args[:-1]) if str(arg) == flag]
    return found[-1] if found else None


def model_path(manifest: Manifest) -> str:
    """The GGUF path the engine opens (its ``--model`` flag)."""
    found = flag_value(list(manifest["spec"]["worker"].get("args") or []), "--model")
    if found is None:
        raise ValueError("the engine's args name no `--model <path>`")
    return found


@dataclasses.dataclass(frozen=True)
class Answer:
    """One streamed completion, as the client saw it and as the engine reported it."""

    text: str
    ttft: float
    """Seconds from sending the request to the first generated token."""
    seconds: float
    prompt_tokens: int
    """Prompt tokens the engine computed for this request (``timings.prompt_n``)."""
    cached_tokens: int
    """Prompt tokens the engine reused from its prompt cache (``timings.cache_n``)."""

    @property
    def hit_ratio(self) -> float:
        total = self.prompt_tokens + self.cached_tokens
        return self.cached_tokens / total if total else 0.0


def ask(url: str, prompt: str, *, model: str, max_tokens: int = 16, timeout: float = 120.0) -> Answer:
    """POST a streamed ``/v1/completions`` request to ``url`` (the server's base URL); temperature 0."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    started = time.monotonic()
    first: float | None = None
    pieces: list[str] = []
    timings: dict[str, Any] = {}
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:  # say what answered, and why
        detail = error.read()[:300].decode(errors="replace")
        raise RuntimeError(f"POST {request.full_url}: HTTP {error.code}: {detail}") from error
    with response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            for choice in event.get("choices") or []:
                if choice.get("text"):
                    if first is None:
                        first = time.monotonic() - started
                    pieces.append(choice["text"])
            timings = event.get("timings") or timings
    seconds = time.monotonic() - started
    if not timings:
        raise ValueError("the engine reported no timings: is this llama.cpp's llama-server?")
    return Answer(
        text="".join(pieces),
        ttft=first if first is not None else seconds,
        seconds=seconds,
        prompt_tokens=int(timings.get("prompt_n", 0)),
        cached_tokens=int(timings.get("cache_n", 0)),
    )


def long_prompt(words: int = 600) -> str:
    """A long document and a question: the same text every time, so a second request can reuse all of it."""
    sentences = [
        "The warm node keeps the model weights on its local NVMe drive.",
        "A cold node downloads them from object storage before the server starts.",
        "The router sends requests that share a prefix to the replica that computed it.",
        "Prompt caching lets the engine skip the prefill of a prefix it already holds.",
    ]
    text: list[str] = []
    index = 0
    while sum(len(s.split()) for s in text) < words:
        text.append(f"Note {index + 1}: {sentences[index % len(sentences)]}")
        index += 1
    return "Read the notes, then answer.\n" + "\n".join(text) + "\nQuestion: where does a warm node keep weights?\n"
