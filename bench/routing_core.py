"""The routing decision's own CPU in one process: what a request costs the router before and after any network.

    python bench/routing_core.py                          # 5 runs of 2,000 requests, medians and ranges
    python bench/routing_core.py --results-name NAME      # also bench/results/<date>-NAME.json

Three paths, each timed with the process's CPU clock over a run of requests (2,048-token chat prompts of 32
prefix groups, 12 replicas, the default knobs):

* **text**: parse the body, key its rendered head, pick (``prefixaware``) and record the placement;
* **events**: the same with ``kvEvents``: tokenize with a model tokenizer, key the token blocks, pick over
  the event index and the engines' load, record the placement;
* **kv events in**: decode and apply the KV-event batch an engine publishes for one such request (128 blocks).

The HTTP path (the proxy's or the picker's) is not included: ``bench/routing.py`` measures whole processes.
Run it from another tree (``PYTHONPATH=<tree>/operator``) to time that tree's router the same way.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import provenance
import warmstart
from warmstart.api.routers import RouterConfig
from warmstart.router import bodies, kvevents
from warmstart.router.routing import Router
from warmstart.sim import kvpublishing, tinytokenizer, workloads

REPLICAS = [f"http://10.0.0.{i}:8000" for i in range(1, 13)]
GROUPS = 32
BLOCK = 16


def _bodies(count: int) -> list[bytes]:
    rng = random.Random(3)
    systems = [workloads.words(rng, 1900) for _ in range(GROUPS)]
    out = []
    for i in range(count):
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": systems[i % GROUPS]},
                {"role": "user", "content": workloads.words(rng, 40)},
            ],
            "max_tokens": 1,
        }
        out.append(json.dumps(body).encode())
    return out


def _router(config: RouterConfig) -> Router:
    router = Router(config, REPLICAS)
    if config.kv_events:
        router.engines.live = lambda replica: True  # type: ignore[method-assign]  # every engine publishes
    return router


def _decisions(router: Router, raws: list[bytes]) -> Callable[[], int]:
    config = router.config
    limit = config.block_chars * config.max_blocks

    def run() -> int:
        for raw in raws:
            parsed = bodies.parse_body(raw, limit, config.session_field, keep=config.kv_events)
            routed = router.decide(parsed, None)
            router.policy.placed(routed.decision.candidates[0], routed.key)
        return len(raws)

    return run


def _kv_events(router: Router, raws: list[bytes]) -> Callable[[], int]:
    """The batch each request's prefill makes its engine publish, decoded and applied."""
    tokenizer = router.engines.tokenizer
    assert tokenizer is not None
    payloads = []
    for n, raw in enumerate(raws[: 4 * GROUPS]):
        tokens = tokenizer.request_tokens("", json.loads(raw), 128 * BLOCK) or ()
        whole = tokens[: len(tokens) // BLOCK * BLOCK]
        hashes = [n * 1000 + i for i in range(len(whole) // BLOCK)]
        stored = ["BlockStored", hashes, None, list(whole), BLOCK, None, "GPU", None]
        payloads.append(kvpublishing.encode_batch([stored], time.time()))
    index = router.engines.index

    def run() -> int:
        for n in range(len(raws)):
            batch = kvevents.decode_batch(payloads[n % len(payloads)])
            if hasattr(index, "apply_batch"):
                index.apply_batch(REPLICAS[n % len(REPLICAS)], batch)
            else:
                for event in batch.events:
                    index.apply(REPLICAS[n % len(REPLICAS)], event)
        return len(raws)

    return run


def _timed(run: Callable[[], int]) -> float:
    """CPU milliseconds per request of one run."""
    start = time.process_time()
    count = run()
    return (time.process_time() - start) * 1000 / count


def _figures(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--results-name", metavar="NAME")
    p.add_argument("--router-commit", help="the commit of the router timed, when it is another tree's (PYTHONPATH)")
    args = p.parse_args()
    started = provenance.start()
    raws = _bodies(args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        tokdir = str(tinytokenizer.build(Path(tmp) / "tok"))
        paths = {
            "text": lambda: _decisions(_router(RouterConfig(strategy="prefixaware")), raws),
            "events": lambda: _decisions(
                _router(RouterConfig(strategy="prefixaware", kv_events=True, tokenizer_dir=tokdir)), raws
            ),
            "kv_events_in": lambda: _kv_events(
                _router(RouterConfig(strategy="prefixaware", kv_events=True, tokenizer_dir=tokdir)), raws
            ),
        }
        results: dict[str, Any] = {}
        for name, make in paths.items():
            warm = make()
            warm()  # first run: caches and the index fill
            per_run = [_timed(warm) for _ in range(args.runs)]
            results[name] = _figures(per_run)
            f = results[name]
            print(f"{name:14s} {f['median']:.4f} ms/request CPU (min {f['min']:.4f}, max {f['max']:.4f})", flush=True)
    record = {
        "router_tree": str(Path(warmstart.__file__).resolve().parent),
        "router_commit": args.router_commit or started.commit,
        "requests_per_run": args.requests,
        "replicas": len(REPLICAS),
        "cpu_ms_per_request": results,
    }
    if args.results_name:
        print(f"wrote {provenance.write(args.results_name, started, record)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
