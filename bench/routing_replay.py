"""Offline replay of the routing policies on a modelled fleet: share, hit ratio and p99 TTFT in seconds, no processes.

    python bench/routing_replay.py                      # default knobs, every workload, 1/2/4 routers
    python bench/routing_replay.py balanceEpsilon=0.3   # try other RouterConfig knobs
    python bench/routing_replay.py seeds=5              # mean over 5 seeds of every workload (one by default)

Each workload also runs under a model of SGLang's ``cache_aware`` (default and tight guard,
``sglang_model.py``) so a policy change can be screened against it, p99 TTFT included.

The model is the simulator's engine reduced to arithmetic: each replica has an LRU prefix cache
of ``cache_tokens`` (the benchmark's size), a serial prefill at 10,000 tokens/s and decode at 40
tokens/s per sequence, no slot limit. Each request goes to one of R router instances at random;
each instance sees only the in-flight requests it sent itself, as separate router processes
do. It is a fast screen for policy changes; ``bench/routing.py`` measures the real processes.
"""

from __future__ import annotations

import heapq
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_model
from warmstart.api.routers import RouterConfig
from warmstart.router import strategies
from warmstart.router.prefixes import prompt_key
from warmstart.sim import workloads
from warmstart.sim.engine import BlockCache, EngineParams, count_tokens, prompt_blocks
from warmstart.sim.server import render_prompt

FLEET = 8
PREFILL_TPS = 10_000.0
DECODE_TPS = 40.0


@dataclass
class Outcome:
    """What one replayed run measured."""

    hit_ratio: float
    max_mean_share: float
    ttft_p99_ms: float
    mean_inflight: float
    per_replica: dict[str, int] = field(default_factory=dict)


@dataclass
class _Replica:
    cache: BlockCache
    free_at: float = 0.0
    served: int = 0


class Fleet:
    """N replicas, R router instances with their own policy state and their own in-flight view."""

    def __init__(
        self,
        config: RouterConfig,
        routers: int,
        cache_tokens: int,
        seed: int = 0,
        sglang: dict[str, float] | None = None,
    ) -> None:
        self.config = config
        self.names = [f"r{i}" for i in range(FLEET)]
        blocks = EngineParams(cache_tokens=cache_tokens).cache_blocks
        self.replicas = {name: _Replica(BlockCache(blocks)) for name in self.names}
        self.policies: list[strategies.Policy] = [
            sglang_model.SGLangCacheAware(**sglang) if sglang else strategies.build(config, random.Random(seed + i))  # type: ignore[arg-type]
            for i in range(routers)
        ]
        self.local = [dict.fromkeys(self.names, 0) for _ in range(routers)]
        # per router: (first byte at, replica, uncached characters expected) of requests not yet answered
        self.prefilling: list[list[tuple[float, str, int]]] = [[] for _ in range(routers)]
        self.rng = random.Random(seed)
        self.queries = self.hits = 0.0
        self.ttfts: list[float] = []
        self.busy_seconds = 0.0

    def send(self, now: float, body: dict[str, object], output_tokens: int) -> tuple[float, int, str]:
        """Route and serve one request; returns (finish time, router index, replica)."""
        router = self.rng.randrange(len(self.policies))
        user = body.get("user")
        session = user if isinstance(user, str) else None
        key = prompt_key(
            "", body, block_chars=self.config.block_chars, max_blocks=self.config.max_blocks, session=session
        )
        pending = self.prefilling[router] = [p for p in self.prefilling[router] if p[0] > now]
        backlog = dict.fromkeys(self.names, 0)
        for _, replica_name, chars in pending:
            backlog[replica_name] += chars
        view = strategies.Snapshot(
            tuple(strategies.ReplicaLoad(n, self.local[router][n], backlog[n]) for n in self.names)
        )
        decision = self.policies[router].choose(view, key)
        name = decision.candidates[0]
        self.policies[router].placed(name, key)
        self.local[router][name] += 1
        replica = self.replicas[name]
        replica.served += 1
        prompt = render_prompt(body)
        tokens = count_tokens(prompt)
        hit = min(replica.cache.lookup_and_fill(prompt_blocks(prompt, 16)) * 16, tokens - 1)
        self.queries += tokens
        self.hits += hit
        start = max(now, replica.free_at)
        replica.free_at = start + (tokens - hit) / PREFILL_TPS
        ttft = replica.free_at - now + 0.003
        pending.append((now + ttft, name, max(0, key.chars - decision.matched_blocks * self.config.block_chars)))
        self.ttfts.append(ttft)
        finish = now + ttft + output_tokens / DECODE_TPS
        self.busy_seconds += finish - now
        return finish, router, name

    def done(self, router: int, name: str) -> None:
        self.local[router][name] -= 1

    def outcome(self, span: float) -> Outcome:
        served = {name: r.served for name, r in self.replicas.items()}
        mean = sum(served.values()) / FLEET
        ordered = sorted(self.ttfts)
        return Outcome(
            self.hits / self.queries,
            max(served.values()) / mean,
            ordered[int(0.99 * (len(ordered) - 1))] * 1000,
            self.busy_seconds / span / FLEET,
            served,
        )


def open_loop(fleet: Fleet, requests: list[workloads.Request]) -> Outcome:
    events: list[tuple[float, int, int, str]] = []
    for request in requests:
        while events and events[0][0] <= request.at:
            _, _, router, name = heapq.heappop(events)
            fleet.done(router, name)
        output = int(request.body.get("max_tokens", 256))  # type: ignore[call-overload]
        finish, router, name = fleet.send(request.at, request.body, output)
        heapq.heappush(events, (finish, id(request), router, name))
    return fleet.outcome(max(e[0] for e in events) if events else 1.0)


def chat(fleet: Fleet, users: list[workloads.Conversation]) -> Outcome:
    # (time, seq, kind, user index, router, replica): kind 0 = finish, 1 = send
    events: list[tuple[float, int, int, int, int, str]] = []
    seq = 0
    rounds = dict.fromkeys(range(len(users)), 0)
    for index, user in enumerate(users):
        heapq.heappush(events, (user.start_at, seq, 1, index, -1, ""))
        seq += 1
    end = 0.0
    filler = random.Random(5)
    while events:
        now, _, kind, index, router, name = heapq.heappop(events)
        user = users[index]
        if kind == 0:
            fleet.done(router, name)
            user.history += [
                {"role": "user", "content": user.questions[rounds[index]]},
                {"role": "assistant", "content": workloads.words(filler, user.output_tokens)},
            ]
            rounds[index] += 1
            if rounds[index] < len(user.questions):
                seq += 1
                heapq.heappush(events, (now + user.think_s, seq, 1, index, -1, ""))
            end = max(end, now)
            continue
        body = workloads.chat_body(user, rounds[index])
        finish, router, name = fleet.send(now, body, user.output_tokens)
        seq += 1
        heapq.heappush(events, (finish, seq, 0, index, router, name))
    return fleet.outcome(end)


#: (workload, load): arrival rate (requests per model second) or chat users, and output tokens.
SCENARIOS: dict[tuple[str, str], dict[str, float]] = {
    ("shared_prefix", "low"): {"rate": 9.0, "output": 32},
    ("shared_prefix", "high"): {"rate": 38.0, "output": 256},
    ("hot_prefix", "low"): {"rate": 9.0, "output": 32},
    ("hot_prefix", "high"): {"rate": 38.0, "output": 256},
    ("multi_turn", "low"): {"users": 64, "think_s": 21.0, "spread_s": 20.0},
    ("multi_turn", "low16"): {"users": 16},  # the former low-load chat setting (bench/routing.py)
    ("multi_turn", "high"): {"users": 96},
}


def run(
    config: RouterConfig,
    workload: str,
    load: str,
    routers: int,
    groups: int = 32,
    per_group: int = 8,
    sglang: dict[str, float] | None = None,
    seed: int = 0,
) -> Outcome:
    cache_tokens = groups * 2048 // 2
    fleet = Fleet(config, routers, cache_tokens, seed=seed, sglang=sglang)
    scenario = SCENARIOS[(workload, load)]
    if workload == "multi_turn":
        users = workloads.multi_turn(
            users=int(scenario["users"]),
            rounds=5,
            think_s=scenario.get("think_s", 2.0),
            spread_s=scenario.get("spread_s", 5.0),
            seed=2 + seed,
        )
        return chat(fleet, users)
    requests = workloads.shared_prefix(
        groups=groups,
        per_group=per_group,
        rate=scenario["rate"],
        output_tokens=int(scenario["output"]),
        hot_share=0.5 if workload == "hot_prefix" else 0.0,
        seed=1 + seed,
    )
    return open_loop(fleet, requests)


def mean(outcomes: list[Outcome]) -> Outcome:
    """The mean of each figure over several seeds (per-replica counts dropped)."""
    n = len(outcomes)
    return Outcome(
        sum(o.hit_ratio for o in outcomes) / n,
        sum(o.max_mean_share for o in outcomes) / n,
        sum(o.ttft_p99_ms for o in outcomes) / n,
        sum(o.mean_inflight for o in outcomes) / n,
    )


SGLANG: dict[str, dict[str, float]] = {"sg-dflt": sglang_model.DEFAULT, "sg-guard": sglang_model.GUARD}


def main() -> int:
    knobs = {k: yaml.safe_load(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}
    seeds = int(knobs.pop("seeds", 1))
    config = RouterConfig.model_validate(
        {"strategy": "prefixaware", "indexCapacityBlocks": 32 * 2048 // 2 * 4 // 256, **knobs}
    )
    print(f"knobs: {knobs}")
    print(f"{'workload':14s} {'load':5s} {'router':>8s} {'hit':>6s} {'share':>6s} {'p99 ms':>7s} {'inflight':>8s}")
    for workload, load in SCENARIOS:
        rows = [(f"x{r}", mean([run(config, workload, load, r, seed=s) for s in range(seeds)])) for r in (1, 2, 4)]
        rows += [
            (label, mean([run(config, workload, load, 1, sglang=sg, seed=s) for s in range(seeds)]))
            for label, sg in SGLANG.items()
        ]
        best = min(out.ttft_p99_ms for label, out in rows if label.startswith("sg"))
        for label, out in rows:
            print(
                f"{workload:14s} {load:5s} {label:>8s} {out.hit_ratio:6.3f} {out.max_mean_share:6.2f} "
                f"{out.ttft_p99_ms:7.0f} {out.mean_inflight:8.2f}"
                + (f"  p99 x{out.ttft_p99_ms / best:.2f} of best SGLang" if label == "x1" else ""),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
