"""Placement from engine truth: least engine-reported load for new prefixes, rendezvous ties, own picks, TTL, bounds."""

from __future__ import annotations

from warmstart._routing_core import chain_keys
from warmstart.api.routers import RouterConfig
from warmstart.router import kvevents
from warmstart.router.engineload import EngineLoad
from warmstart.router.enginerouting import EngineAwarePolicy, EngineState
from warmstart.router.kvsubscribing import EventPorts, Follower, StreamState
from warmstart.router.prefixes import PromptKey
from warmstart.router.strategies import ReplicaLoad, Snapshot

NAMES = ("http://a:1", "http://b:1", "http://c:1", "http://d:1")
CONFIG = RouterConfig(strategy="prefixaware", kv_events=True, speculative_ttl_seconds=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def engines_with_live(live: tuple[str, ...]) -> EngineState:
    engines = EngineState(CONFIG)
    engines.follower = Follower(engines.index, EventPorts(5557, None))
    for name in live:
        engines.follower.streams[name] = StreamState("tcp://x:1", None, last_seq=0, batches=1)
    return engines


def report(engines: EngineState, loads: dict[str, float], at: float) -> None:
    for name, requests in loads.items():
        engines.loads.update(name, EngineLoad(requests, 0.0, None, at))


def snapshot(inflight: dict[str, int] | None = None) -> Snapshot:
    return Snapshot(tuple(ReplicaLoad(n, (inflight or {}).get(n, 0)) for n in NAMES))


def key_for(tokens: list[int]) -> PromptKey:
    return PromptKey(blocks=(), chars=len(tokens) * 4, token_blocks=chain_keys(tokens, 16))


def test_new_prefix_goes_to_the_least_loaded_engine_and_routers_agree() -> None:
    clock = Clock()
    engines = engines_with_live(NAMES)
    report(engines, {NAMES[0]: 6, NAMES[1]: 1, NAMES[2]: 4, NAMES[3]: 1}, clock.now)
    routers = [EngineAwarePolicy(CONFIG, engines, clock) for _ in range(2)]
    agreed = 0
    for prefix in range(200):
        key = key_for([prefix * 1000 + i for i in range(64)])
        picks = {router.choose(snapshot(), key).candidates[0] for router in routers}
        assert picks <= {NAMES[1], NAMES[3]}  # the two least loaded (a is over the bound, c is busier)
        agreed += len(picks) == 1
    assert agreed == 200  # a tie breaks by rendezvous on the first block: the same on both routers
    homes = {routers[0].choose(snapshot(), key_for([p * 1000 + i for i in range(64)])).candidates[0] for p in range(50)}
    assert homes == {NAMES[1], NAMES[3]}  # ties spread over both


def test_cached_prefix_stays_own_picks_count_and_speculation_expires() -> None:
    clock = Clock()
    engines = engines_with_live(NAMES)
    report(engines, dict.fromkeys(NAMES, 0.0), clock.now)
    policy = EngineAwarePolicy(CONFIG, engines, clock)
    tokens = list(range(64))
    # the engine c reports it holds the first three blocks
    hashes = [11, 12, 13]
    engines.index.apply(NAMES[2], kvevents.BlockStored(tuple(hashes), None, tuple(tokens[:48]), 16))
    key = key_for(tokens)
    assert policy.choose(snapshot(), key).candidates[0] == NAMES[2]
    assert policy.last.tokens == 48 and policy.last.by_events
    # a new prefix: the router's own pick counts against the replica until a scrape started after it
    other = key_for([7000 + i for i in range(64)])
    first = policy.choose(snapshot(), other).candidates[0]
    policy.placed(first, other)
    second = policy.choose(snapshot(), key_for([9000 + i for i in range(64)])).candidates[0]
    assert second != first
    # the pick is speculatively in the index: the same prefix again goes to the same replica
    assert policy.choose(snapshot(), other).candidates[0] == first
    clock.now += 3.0  # TTL passed, no event confirmed it; a scrape after the pick shows the engine idle
    report(engines, dict.fromkeys(NAMES, 0.0), clock.now)
    policy.engines.index.expire(clock.now)
    assert policy.engines.index.match(other.token_blocks or (), NAMES, clock.now) == {}


def test_bounded_load_reads_engine_load_and_inflight_only_breaks_ties() -> None:
    clock = Clock()
    engines = engines_with_live(NAMES)
    policy = EngineAwarePolicy(CONFIG, engines, clock)
    tokens = list(range(64))
    engines.index.apply(NAMES[0], kvevents.BlockStored((1, 2, 3, 4), None, tuple(tokens), 16))
    # a's engine reports 30 requests (other routers' traffic); the ceiling is ceil(1.5 x 31 / 4) = 12
    report(engines, {NAMES[0]: 30, NAMES[1]: 0, NAMES[2]: 0, NAMES[3]: 0}, clock.now)
    decision = policy.choose(snapshot(), key_for(tokens))
    assert decision.candidates[0] != NAMES[0] and decision.spilled
    # the guard reads the engines' load, not this router's in-flight counts: a replica this router has 50
    # requests on, whose engine reports it idle, is still the new prefix's pick (its rendezvous home)
    report(engines, dict.fromkeys(NAMES, 1.0), clock.now)
    new = key_for([5000 + i for i in range(64)])
    home = policy.choose(snapshot(), new).candidates[0]
    assert policy.choose(snapshot({home: 50}), new).candidates[0] == home


def test_replicas_without_events_use_the_text_index_with_engine_load() -> None:
    clock = Clock()
    engines = engines_with_live(())  # nothing publishes (a llama.cpp fleet)
    report(engines, {NAMES[0]: 2, NAMES[1]: 0, NAMES[2]: 2, NAMES[3]: 2}, clock.now)
    policy = EngineAwarePolicy(CONFIG, engines, clock)
    key = PromptKey(blocks=(1, 2, 3), chars=3 * 256, token_blocks=None)
    assert policy.choose(snapshot(), key).candidates[0] == NAMES[1]  # least loaded
    policy.placed(NAMES[2], key)
    choice = policy.choose(snapshot(), key)
    assert choice.candidates[0] == NAMES[2] and not policy.last.by_events and policy.last.tokens == 3 * 64


async def test_kv_events_switch_live_with_the_configuration() -> None:
    from warmstart.router import strategies
    from warmstart.router.routing import Router

    router = Router(RouterConfig(strategy="prefixaware"), list(NAMES))
    router.start()
    assert isinstance(router.policy, strategies.PrefixAwarePolicy) and router.status()["engines"] is None
    router.apply_config(CONFIG)
    assert isinstance(router.policy, EngineAwarePolicy)
    status = router.status()["engines"]
    assert status["enabled"] and set(status["replicas"]) == set(NAMES) and status["tokenizer"] == "none"
    assert router.engines.follower is not None and set(router.engines.follower.streams) == set(NAMES)
    router.set_backends(list(NAMES[:2]))  # a replica goes: its subscription closes
    assert set(router.engines.follower.streams) == set(NAMES[:2])
    router.apply_config(RouterConfig(strategy="prefixaware"))
    assert isinstance(router.policy, strategies.PrefixAwarePolicy) and router.engines.follower is None
    await router.stop()


def test_at_low_load_new_prefixes_go_to_the_least_served_engines() -> None:
    clock = Clock()
    engines = engines_with_live(NAMES)
    served = {NAMES[0]: 40.0, NAMES[1]: 40.0, NAMES[2]: 0.0, NAMES[3]: 0.0}
    for step in range(2):  # two scrapes give each engine a served-request rate
        for name in NAMES:
            engines.loads.update(name, EngineLoad(0.0, 0.0, None, clock.now + step, served[name] * step))
    routers = [EngineAwarePolicy(CONFIG, engines, clock) for _ in range(2)]
    for prefix in range(50):
        key = key_for([prefix * 1000 + i for i in range(64)])
        picks = {router.choose(snapshot(), key).candidates[0] for router in routers}
        assert len(picks) == 1 and picks <= {NAMES[2], NAMES[3]}
