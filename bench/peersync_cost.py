"""The peer sync's own CPU per request: N routers in one process, sharing picks over real ZMQ sockets on loopback.

    python bench/peersync_cost.py --routers 2 4 --requests 2000 [--results-name NAME]

Each request is a pick on one router (32 text blocks; with ``--tokens``, 128 token keys as with ``kvEvents``), a
slot held for ``--hold`` seconds and freed, the routers taking turns; every router's
``warmstart_router_peer_sync_cpu_seconds`` (sending, receiving, checking and entering peers' picks, heartbeats)
is summed and divided by the requests. No HTTP, no engines: the figure is the sync alone, paid over all routers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import provenance
from warmstart.api.routers import RouterConfig
from warmstart.router.peersync import PeerSync
from warmstart.router.prefixes import PromptKey
from warmstart.router.routing import Router

REPLICAS = [f"http://10.0.0.{i}:8000" for i in range(8)]


async def measure(routers: int, requests: int, hold: float, tokens: bool) -> dict[str, float]:
    config = RouterConfig.model_validate({"strategy": "prefixaware", "kvEvents": tokens})
    fleet = [Router(config, REPLICAS) for _ in range(routers)]
    key = os.urandom(32).hex().encode()
    syncs = [PeerSync(router, key, 0, "127.0.0.1") for router in fleet]
    ports = [sync.start() for sync in syncs]
    for i, sync in enumerate(syncs):
        sync.set_peers([f"tcp://127.0.0.1:{port}" for j, port in enumerate(ports) if j != i])
    await asyncio.sleep(0.5)
    rng = random.Random(1)

    def cpu() -> tuple[float, float]:
        return (
            sum(s.metrics.cpu._value.get() for s in syncs),
            sum(s.metrics.apply_cpu._value.get() for s in syncs),
        )

    before, started = cpu(), time.monotonic()
    for i in range(requests):
        router = fleet[i % routers]
        url = REPLICAS[rng.randrange(len(REPLICAS))]
        token_keys = tuple(rng.getrandbits(64) for _ in range(128)) if tokens else None
        prompt = PromptKey(tuple(rng.getrandbits(64) for _ in range(32)), 8192, token_blocks=token_keys)
        router.policy.placed(url, prompt)
        replica = router.fleet.get(url)
        assert replica is not None
        replica.inflight += 1
        await asyncio.sleep(hold)
        replica.inflight -= 1
        router.admission.wake()
    await asyncio.sleep(0.3)
    after, seconds = cpu(), time.monotonic() - started
    received = sum(s.metrics.received._value.get() for s in syncs)
    for sync in syncs:
        await sync.stop()
    return {
        "routers": routers,
        "requests": requests,
        "seconds": round(seconds, 2),
        "messages_received": received,
        "sync_cpu_ms_per_request": 1000 * (after[0] - before[0]) / requests,
        "of_which_entering_picks_ms": 1000 * (after[1] - before[1]) / requests,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--routers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--hold", type=float, default=0.004, help="seconds between picks (a slot is held that long)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--results-name", help="also write bench/results/<date>-NAME.json")
    args = p.parse_args()
    started = provenance.start()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for n in args.routers:
            for tokens in (False, True):
                row = asyncio.run(measure(n, args.requests, args.hold, tokens))
                row.update(run=run, mode="events" if tokens else "text")
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.results_name:
        print(f"wrote {provenance.write(args.results_name, started, {'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
