"""Routing policies on hand-made snapshots: determinism, bounded load, spill order, movement on scale."""

from __future__ import annotations

import random
from collections import Counter

from warmstart.api.routers import RouterConfig
from warmstart.api.strategies import RoutingStrategy
from warmstart.router import strategies
from warmstart.router.prefixes import PromptKey, block_hashes
from warmstart.router.strategies import ReplicaLoad, Snapshot

NAMES = [f"http://10.0.0.{i}:8000" for i in range(8)]


def snapshot(loads: dict[str, int] | None = None, names: list[str] = NAMES) -> Snapshot:
    loads = loads or {}
    return Snapshot(tuple(ReplicaLoad(name, loads.get(name, 0)) for name in names))


def key(group: int, suffix: str = "", blocks: int = 8) -> PromptKey:
    text = f"group-{group:04d}-" * 200 + suffix
    return PromptKey(blocks=block_hashes(text, 256, blocks), chars=len(text))


def prefixaware(**knobs: object) -> strategies.PrefixAwarePolicy:
    policy = strategies.build(RouterConfig(strategy="prefixaware", **knobs), random.Random(1))
    assert isinstance(policy, strategies.PrefixAwarePolicy)
    return policy


def test_build_maps_every_strategy_and_kvaware_to_prefixaware() -> None:
    for name, kind in [
        ("random", strategies.RandomPolicy),
        ("roundrobin", strategies.RoundRobinPolicy),
        ("least_outstanding_requests", strategies.LeastOutstandingPolicy),
        ("session", strategies.SessionPolicy),
        ("prefix_aware", strategies.PrefixAwarePolicy),
        ("kvaware", strategies.PrefixAwarePolicy),
    ]:
        assert isinstance(strategies.build(RouterConfig(strategy=name)), kind)
    assert strategies.build(RouterConfig(strategy="kvaware")).strategy is RoutingStrategy.PREFIXAWARE


def test_empty_fleet_gives_no_candidates() -> None:
    for name in ("random", "roundrobin", "leastoutstanding", "session", "prefixaware"):
        policy = strategies.build(RouterConfig(strategy=name))
        assert policy.choose(Snapshot(()), key(1)).candidates == ()


def test_new_prefix_home_is_deterministic_across_router_instances() -> None:
    first, second = prefixaware(), prefixaware()
    for group in range(50):
        assert first.choose(snapshot(), key(group)).candidates == second.choose(snapshot(), key(group)).candidates


def test_routers_with_different_local_loads_agree_on_new_prefix_homes() -> None:
    """Two router replicas see only their own in-flight counts; a new prefix's home must not depend on them."""
    rng = random.Random(7)
    one, two = prefixaware(), prefixaware()
    disagreements = 0
    for group in range(200):
        # uneven and different per router, all under the in-flight floor (loadMinCeiling) so no spill applies
        load_one = snapshot({name: rng.randrange(0, 4) for name in NAMES})
        load_two = snapshot({name: rng.randrange(0, 4) for name in NAMES})
        home_one = one.choose(load_one, key(group + 1000)).candidates[0]
        home_two = two.choose(load_two, key(group + 1000)).candidates[0]
        disagreements += home_one != home_two
    assert disagreements == 0


def test_homes_spread_over_the_fleet() -> None:
    policy = prefixaware()
    homes = Counter(policy.choose(snapshot(), key(group)).candidates[0] for group in range(800))
    assert set(homes) == set(NAMES)
    assert max(homes.values()) < 2 * 800 / len(NAMES)


def test_a_placed_prefix_sticks_to_its_replica_even_off_home() -> None:
    policy = prefixaware()
    home = policy.choose(snapshot(), key(7)).candidates[0]
    elsewhere = next(name for name in NAMES if name != home)
    policy.placed(elsewhere, key(7, "first question"))
    decision = policy.choose(snapshot(), key(7, "another question"))
    assert decision.candidates[0] == elsewhere
    assert decision.matched_blocks == 8
    assert not decision.spilled


def test_longest_match_wins_over_a_shorter_one() -> None:
    policy = prefixaware()
    long_key = key(3, blocks=8)
    policy.placed(NAMES[1], PromptKey(long_key.blocks[:2], 512))
    policy.placed(NAMES[2], long_key)
    assert policy.choose(snapshot(), long_key).candidates[0] == NAMES[2]


def test_overloaded_best_replica_spills_in_the_prefix_rendezvous_order() -> None:
    policy = prefixaware(load_epsilon=0.0, load_min_ceiling=1)
    order = policy.choose(snapshot(), key(11)).candidates
    busy = snapshot({order[0]: 5})  # ceiling = ceil(6/8) = 1 < 5
    decision = policy.choose(busy, key(11))
    assert decision.spilled
    assert decision.candidates[0] == order[1]
    assert decision.candidates[-1] == order[0]  # the overloaded one is tried last
    assert list(decision.candidates[:-1]) == [name for name in order if name != order[0]]


def test_concurrency_cap_makes_a_replica_ineligible() -> None:
    policy = prefixaware(max_concurrent_requests=4, load_epsilon=10.0)
    best = policy.choose(snapshot(), key(5)).candidates[0]
    loads = {name: 3 for name in NAMES} | {best: 4}
    decision = policy.choose(snapshot(loads), key(5))
    assert decision.candidates[0] != best
    assert decision.spilled


def test_load_ceiling_formula_rounds_up_and_has_a_floor() -> None:
    assert strategies.load_ceiling(snapshot({name: 10 for name in NAMES}), 0.2, 1) == 13  # ceil(1.2*81/8)=13
    assert strategies.load_ceiling(snapshot(), 0.2, 2) == 2
    assert strategies.load_ceiling(snapshot({name: 5 for name in NAMES}), 0.0, 1) == 6  # ceil(41/8) = 6


def test_bounded_load_caps_a_hot_prefix_and_replicates_it_in_order() -> None:
    policy = prefixaware(load_epsilon=0.25, load_min_ceiling=1)
    loads = {name: 0 for name in NAMES}
    background = random.Random(3)
    used: list[str] = []
    for request in range(400):
        if request % 2:  # half the traffic is one hot prefix
            choice = policy.choose(snapshot(loads), key(0, f"q{request}")).candidates[0]
            used.append(choice)
        else:
            choice = policy.choose(snapshot(loads), key(1000 + background.randrange(500))).candidates[0]
        ceiling = strategies.load_ceiling(snapshot(loads), 0.25, 1)
        assert loads[choice] < ceiling
        loads[choice] += 1
        policy.placed(choice, key(0) if request % 2 else key(1000))
    total = sum(loads.values())
    assert max(loads.values()) <= -(-1.25 * total // len(NAMES))
    home_order = prefixaware().choose(snapshot(), key(0)).candidates
    hot_replicas = set(used)
    assert home_order[0] in hot_replicas
    # replication follows the rendezvous order: the replicas used are the order's head
    assert hot_replicas == set(home_order[: len(hot_replicas)])
    # and it stays a minority: half the traffic under a ceiling of 1.25x the mean needs ceil(0.5 * 8 / 1.25) = 4
    # replicas, plus one for the ceiling's rounding while the totals are small; a spread over all 8 is the failure
    assert len(hot_replicas) <= 5


def test_adding_a_replica_moves_about_one_ninth_of_homes_all_to_it() -> None:
    policy = prefixaware()
    before = {group: policy.choose(snapshot(), key(group)).candidates[0] for group in range(900)}
    grown = [*NAMES, "http://10.0.0.8:8000"]
    after = {group: policy.choose(snapshot(names=grown), key(group)).candidates[0] for group in range(900)}
    moved = [group for group in before if before[group] != after[group]]
    assert all(after[group] == grown[-1] for group in moved)
    assert 0.05 < len(moved) / 900 < 1.5 / 9


def test_removing_a_replica_moves_only_its_homes() -> None:
    policy = prefixaware()
    before = {group: policy.choose(snapshot(), key(group)).candidates[0] for group in range(800)}
    shrunk = NAMES[:-1]
    after = {group: policy.choose(snapshot(names=shrunk), key(group)).candidates[0] for group in range(800)}
    moved = {group for group in before if before[group] != after[group]}
    assert moved == {group for group in before if before[group] == NAMES[-1]}


def test_forget_drops_a_departed_replicas_prefixes() -> None:
    policy = prefixaware()
    policy.placed(NAMES[3], key(2))
    policy.forget(NAMES[3])
    assert policy.index.blocks(NAMES[3]) == 0


def test_short_prompts_go_to_the_least_loaded() -> None:
    policy = prefixaware()
    loads = {name: 5 for name in NAMES} | {NAMES[6]: 1}
    assert policy.choose(snapshot(loads), PromptKey((), 10)).candidates[0] == NAMES[6]


def test_roundrobin_cycles_in_name_order() -> None:
    policy = strategies.build(RouterConfig(strategy="roundrobin"))
    picks = [policy.choose(snapshot(), key(0)).candidates[0] for _ in range(16)]
    assert picks == sorted(NAMES) * 2


def test_leastoutstanding_picks_the_minimum_and_breaks_ties_randomly() -> None:
    policy = strategies.build(RouterConfig(strategy="leastoutstanding"), random.Random(0))
    loads = {name: 3 for name in NAMES} | {NAMES[2]: 0, NAMES[5]: 0}
    picks = {policy.choose(snapshot(loads), key(0)).candidates[0] for _ in range(50)}
    assert picks == {NAMES[2], NAMES[5]}


def test_random_spreads_and_respects_the_cap() -> None:
    policy = strategies.build(RouterConfig(strategy="random", max_concurrent_requests=2), random.Random(0))
    picks = Counter(policy.choose(snapshot(), key(0)).candidates[0] for _ in range(800))
    assert set(picks) == set(NAMES)
    full = {name: 2 for name in NAMES} | {NAMES[4]: 1}
    assert all(policy.choose(snapshot(full), key(0)).candidates[0] == NAMES[4] for _ in range(20))


def test_session_is_sticky_per_key_and_agrees_across_instances() -> None:
    one = strategies.build(RouterConfig(strategy="session"), random.Random(1))
    two = strategies.build(RouterConfig(strategy="session"), random.Random(2))
    for user in range(30):
        session_key = PromptKey((), 0, session=f"user-{user}")
        picks = {one.choose(snapshot(), session_key).candidates[0] for _ in range(5)}
        assert len(picks) == 1
        assert picks == {two.choose(snapshot(), session_key).candidates[0]}


def test_among_holders_the_shortest_prefill_backlog_wins() -> None:
    policy = prefixaware(prefill_aware=True)
    order = policy.choose(snapshot(), key(21)).candidates
    policy.placed(order[0], key(21))
    policy.placed(order[3], key(21))
    assert policy.choose(snapshot(), key(21)).candidates[0] == order[0]  # no backlog: rendezvous rank
    busy = Snapshot(tuple(ReplicaLoad(n, 0, 9000 if n == order[0] else 0) for n in NAMES))
    decision = policy.choose(busy, key(21))
    assert decision.candidates[0] == order[3]
    assert decision.matched_blocks == 8 and not decision.spilled


def test_a_new_prefix_avoids_the_home_with_a_prefill_backlog() -> None:
    for policy in (prefixaware(prefill_aware=True), prefixaware(prefill_aware=True, home_choices=2)):
        order = policy.choose(snapshot(), key(22)).candidates
        busy = Snapshot(tuple(ReplicaLoad(n, 0, 9000 if n == order[0] else 0) for n in NAMES))
        assert policy.choose(busy, key(22)).candidates[0] == order[1]
    blind = prefixaware(prefill_aware=False)
    assert blind.choose(busy, key(22)).candidates[0] == order[0]


def test_with_prefill_aware_alone_an_idle_home_keeps_a_new_prefix_whatever_the_in_flight_counts() -> None:
    """Only a prefill backlog moves a cold prompt off its home (routers agree on idle homes); the
    in-flight counts each router sees differ, so they break ties only with ``home_choices`` > 1."""
    policy = prefixaware(prefill_aware=True)
    order = policy.choose(snapshot(), key(23)).candidates
    assert policy.choose(snapshot({order[0]: 3}), key(23)).candidates[0] == order[0]
    both_busy = Snapshot(tuple(ReplicaLoad(n, 0, {order[0]: 9000, order[1]: 4000}.get(n, 0)) for n in NAMES))
    assert policy.choose(both_busy, key(23)).candidates[0] == order[1]  # the shorter backlog of the two


def test_an_existing_prefix_stays_with_its_first_holder_when_a_replica_joins() -> None:
    policy = prefixaware()
    grown = [*NAMES, "http://10.0.0.8:8000"]
    # a prefix whose rendezvous top, once the fleet grows, is the new replica
    group = next(g for g in range(500) if policy.choose(snapshot(names=grown), key(g)).candidates[0] == grown[-1])
    old_home = policy.choose(snapshot(), key(group)).candidates[0]
    policy.placed(old_home, key(group))
    policy.placed(grown[-1], key(group))  # one request spilled onto the new replica
    assert policy.choose(snapshot(names=grown), key(group)).candidates[0] == old_home


def test_routers_decide_a_conversations_later_turn_by_its_anchor_from_the_request_body() -> None:
    """Through the real body parser and ``Router.decide``: a router that routed other users of the
    same system prompt, and never this conversation, sends its third turn where another (idle)
    router sent its first."""
    import json

    from warmstart.router.bodies import parse_body
    from warmstart.router.routing import Router

    system = {"role": "system", "content": "Answer briefly and cite the docs. " * 250}

    def body(user: int, turns: int) -> bytes:
        messages = [system]
        for turn in range(turns):
            messages.append({"role": "user", "content": f"user {user} question {turn} " * 20})
            if turn + 1 < turns:
                messages.append({"role": "assistant", "content": f"answer {turn} " * 40})
        return json.dumps({"model": "m", "messages": messages, "user": f"u{user}"}).encode()

    config = RouterConfig(strategy="prefixaware")
    limit = config.block_chars * config.max_blocks

    def decide(router: Router, raw: bytes) -> str:
        routed = router.decide(parse_body(raw, limit, "user"), None)
        choice = routed.decision.candidates[0]
        router.policy.placed(choice, routed.key)
        return choice

    second = Router(config, NAMES)
    for other in range(100, 130):
        decide(second, body(other, 1))
    for user in range(20):
        home = decide(Router(config, NAMES), body(user, 1))  # an idle router: no bound in the way
        assert decide(second, body(user, 3)) == home
