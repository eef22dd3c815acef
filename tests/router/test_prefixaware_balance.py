"""prefixaware's balance: the request-share bound at low load, holders chosen by share, router replicas agreeing.

Pure policy tests on hand-made snapshots (no sockets, no clocks): which replica gets a request
under given loads and shares, and whether two independent router instances pick the same home.
"""

from __future__ import annotations

import random
from collections import Counter

from warmstart._routing_core import ShareMeter
from warmstart.api.routers import RouterConfig
from warmstart.router import strategies
from warmstart.router.prefixes import PromptKey, block_hashes, prompt_key
from warmstart.router.strategies import ReplicaLoad, Snapshot

NAMES = [f"http://10.0.1.{i}:8000" for i in range(8)]
IDLE = Snapshot(tuple(ReplicaLoad(name, 0) for name in NAMES))


def key(group: int, question: int = 0) -> PromptKey:
    """A 2,048-character shared prefix for ``group`` followed by one question (9 blocks of 256)."""
    text = f"system prompt of group {group:05d}. " * 80
    text = text[:2048] + f"question {question:06d} " * 24
    return PromptKey(blocks=block_hashes(text, 256, 16), chars=len(text))


def policy(**knobs: object) -> strategies.PrefixAwarePolicy:
    built = strategies.build(RouterConfig(strategy="prefixaware", **knobs), random.Random(1))
    assert isinstance(built, strategies.PrefixAwarePolicy)
    return built


def route(router: strategies.PrefixAwarePolicy, request: PromptKey, loads: Snapshot = IDLE) -> str:
    choice = router.choose(loads, request).candidates[0]
    router.placed(choice, request)
    return choice


def test_share_meter_counts_recent_requests_and_forgets_old_ones() -> None:
    meter = ShareMeter(window=10)
    for _ in range(5):
        meter.add("a")
    assert 3.5 < meter.recent("a") < 4.0 and meter.recent("b") == 0.0  # 0.9 + 0.81 + ... + 0.9^5
    for _ in range(200):  # twenty windows of requests elsewhere
        meter.add("b")
    assert meter.recent("a") < 0.01
    assert 8.5 < meter.total() < 9.5  # the decayed counts add up to about one window
    meter.forget("b")
    assert meter.total() < 0.01 and meter.recent("b") == 0.0


def test_share_meter_stays_exact_across_renormalisation() -> None:
    meter = ShareMeter(window=2)  # the unit weight doubles per request: renormalises every ~40
    for index in range(1000):
        meter.add("a" if index % 4 else "b")
    assert abs(meter.recent("a") + meter.recent("b") - meter.total()) < 1e-6
    assert 0.0 < meter.recent("a") < 2.0


def test_low_load_hot_prefix_is_bounded_by_request_share() -> None:
    """Half the requests share one prefix and nothing is ever in flight: the old floor of 8 in-flight
    sent them all to one replica (4.6x the mean share); the share bound spreads them."""
    router = policy()
    served: Counter[str] = Counter()
    background = random.Random(4)
    for request in range(800):
        group = 0 if request % 2 else 1 + background.randrange(200)
        served[route(router, key(group, request))] += 1
    assert max(served.values()) / (800 / len(NAMES)) <= 1.3


def test_low_load_uniform_groups_balance_and_stay_on_few_replicas() -> None:
    router = policy()
    served: Counter[str] = Counter()
    holders: dict[int, set[str]] = {}
    order = random.Random(9)
    requests = [group for group in range(32) for _ in range(16)]
    order.shuffle(requests)
    for question, group in enumerate(requests):
        replica = route(router, key(group, question))
        served[replica] += 1
        holders.setdefault(group, set()).add(replica)
    assert max(served.values()) / (len(requests) / len(NAMES)) <= 1.3
    # balance comes mostly from placing groups, not from scattering them: few extra copies
    assert sum(len(replicas) for replicas in holders.values()) <= 32 * 1.5


def test_among_holders_the_replica_with_the_smaller_share_wins() -> None:
    router = policy()
    first, second = NAMES[2], NAMES[5]
    router.placed(first, key(7))
    router.placed(second, key(7))
    for _ in range(2):
        router.placed(first, key(100))  # first has served more recently (still under the bound)
    decision = router.choose(IDLE, key(7, 1))
    assert decision.candidates[0] == second
    assert decision.matched_blocks == 8 and not decision.spilled


def test_a_holder_keeps_its_prefix_within_the_slack_but_a_new_prefix_goes_elsewhere() -> None:
    # balance_epsilon 0, balance_slack 2: bound = (recent + 1) / 8 + 2 for a holder, + 1 otherwise
    holding, lacking = policy(balance_epsilon=0.0, balance_slack=2.0), policy(balance_epsilon=0.0, balance_slack=2.0)
    target = holding.choose(IDLE, key(4)).candidates[0]
    assert lacking.choose(IDLE, key(4)).candidates[0] == target  # the same home on both
    for question in range(2):
        holding.placed(target, key(4, question))  # target served group 4 twice
        lacking.placed(target, key(900, question))  # target served another group twice
    # 2 recent requests on target, bound 3/8 + 2 = 2.375 for a holder: it keeps group 4
    kept = holding.choose(IDLE, key(4, 5))
    assert kept.candidates[0] == target and not kept.spilled
    # ... but 3/8 + 1 = 1.375 to place group 4 on it: the new prefix goes to its next choice
    placed = lacking.choose(IDLE, key(4, 5))
    assert placed.candidates[0] != target and placed.spilled


def test_inflight_burst_ceiling_spills_a_burst_on_the_home() -> None:
    router = policy()
    home = router.choose(IDLE, key(8)).candidates[0]
    busy = Snapshot(tuple(ReplicaLoad(name, 8 if name == home else 0) for name in NAMES))
    # ceiling = max(8, ceil(1.5 x 9 / 8)) = 8: the home with 8 in flight is passed over
    decision = router.choose(busy, key(8))
    assert decision.spilled and decision.candidates[0] != home
    seven = Snapshot(tuple(ReplicaLoad(name, 7 if name == home else 0) for name in NAMES))
    assert router.choose(seven, key(8)).candidates[0] == home


def test_two_router_instances_fed_random_halves_agree_on_homes() -> None:
    """Two routers, each sent a random half of the same stream (a Service's spreading), with
    their own shares and indexes: for most groups they pick the same replica, and a group is
    cached on few replicas. (Agreement is not total: each router places a group it has not seen
    by its own shares; with the share bound off, homes agree always but balance is lost.)"""
    one, two = policy(), policy()
    spread = random.Random(11)
    requests = [group for group in range(64) for _ in range(16)]
    random.Random(12).shuffle(requests)
    homes: dict[int, list[Counter[str]]] = {}
    for question, group in enumerate(requests):
        router_index = spread.randrange(2)
        replica = route((one, two)[router_index], key(group, question))
        homes.setdefault(group, [Counter(), Counter()])[router_index][replica] += 1
    agreed = sum(
        1 for by_router in homes.values() if by_router[0].most_common(1)[0][0] == by_router[1].most_common(1)[0][0]
    )
    copies = sum(len(set(by_router[0]) | set(by_router[1])) for by_router in homes.values())
    assert agreed >= 0.6 * len(homes)
    assert copies <= 1.6 * len(homes)


SYSTEM = "You are a careful assistant for the warmstart project. " * 150  # ~8,000 characters, shared by all


def chat_key(user: int, turns: int) -> PromptKey:
    """Turn ``turns`` (1-based) of ``user``'s conversation: the shared system prompt, the history, the question."""
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"user {user:04d} asks question {turn}: " + "why? " * 80})
        if turn + 1 < turns:
            messages.append({"role": "assistant", "content": f"answer {turn} to user {user}: " + "because. " * 60})
    return prompt_key("/v1/chat/completions", {"messages": messages}, block_chars=256, max_blocks=128)


def test_two_routers_given_disjoint_halves_of_a_chat_trace_keep_conversations_together() -> None:
    """Each turn of 48 conversations goes to one of two independent routers at random (as a Service
    spreads connections). A router that did not route a conversation's earlier turns knows only the
    shared system prompt; the conversation's anchor still sends the turn where the others went,
    unless the first turn was placed past the anchor's first candidate (over the share bound):
    then the conversation ends up on two replicas, never more. (Before: that router chose among the
    system prompt's copies by its own shares, and 43-46 of 48 conversations were split, most
    over three or four replicas.)"""
    routers = (policy(), policy())
    spread = random.Random(3)
    placed: dict[int, set[str]] = {}
    for turn in range(1, 6):
        users = list(range(48))
        spread.shuffle(users)
        for user in users:
            replica = route(routers[spread.randrange(2)], chat_key(user, turn))
            placed.setdefault(user, set()).add(replica)
    whole = sum(1 for replicas in placed.values() if len(replicas) == 1)
    assert whole >= 0.7 * len(placed)  # 36 of 48 here (all 48 start at once, on an idle fleet)
    assert max(len(replicas) for replicas in placed.values()) <= 2
    homes = Counter(replica for replicas in placed.values() for replica in replicas)
    assert len(homes) == len(NAMES)  # and the conversations use the whole fleet


def test_a_router_that_did_not_see_a_conversation_sends_it_to_the_first_turns_replica() -> None:
    """On an idle fleet a first turn goes to its anchor's first candidate; another router, which
    never saw the conversation but has its own history with the shared system prompt, sends every
    later turn there too."""
    first, second = policy(), policy()
    for user in range(100, 140):  # the second router has placed other conversations (system prompt everywhere)
        route(second, chat_key(user, 1))
    for user in range(40):
        fresh = policy()  # an idle router: nothing over any bound
        home = route(fresh, chat_key(user, 1))
        assert route(first, chat_key(user, 2)) == home
        assert route(second, chat_key(user, 3)) == home


def test_a_conversation_stays_on_its_replica_over_the_share_bound_but_not_at_the_burst_ceiling() -> None:
    router = policy()
    home = route(router, chat_key(1, 1))
    for other in range(40):  # the home has served far more than its share since
        router.placed(home, key(500 + other))
    decision = router.choose(IDLE, chat_key(1, 2))
    assert decision.candidates[0] == home and not decision.spilled
    burst = Snapshot(tuple(ReplicaLoad(name, 8 if name == home else 0) for name in NAMES))
    moved = router.choose(burst, chat_key(1, 2))
    assert moved.candidates[0] != home and moved.spilled


def test_new_conversations_are_placed_evenly() -> None:
    router = policy()
    starts = Counter(route(router, chat_key(user, 1)) for user in range(64))
    assert max(starts.values()) <= 1.25 * 64 / len(NAMES)


def test_a_repeated_first_turn_is_spread_like_a_hot_prefix() -> None:
    """The same first turn again and again (one anchor, nothing after it) must not stick to one replica."""
    router = policy()
    served: Counter[str] = Counter()
    background = random.Random(6)
    for request in range(800):
        served[route(router, chat_key(0, 1) if request % 2 else key(1 + background.randrange(200), request))] += 1
    assert max(served.values()) / (800 / len(NAMES)) <= 1.3


def test_conversations_that_open_the_same_way_are_spread_like_a_hot_prefix() -> None:
    """Many conversations start with the same first question (one anchor), then diverge. Their later
    turns must not all stick to the opening's first replica: with the opening on several replicas
    and no history of their own yet, they are held to the share bound like a hot prefix."""
    router = policy()
    served: Counter[str] = Counter()
    for _ in range(200):  # opening: the same first turn for everyone
        served[route(router, chat_key(0, 1))] += 1
    for user in range(200):  # second turns: the same opening, then each user's own answer and question
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "user 0000 asks question 0: " + "why? " * 80},
            {"role": "assistant", "content": f"answer for conversation {user}: " + "because. " * 60},
            {"role": "user", "content": f"follow-up {user} " * 30},
        ]
        turn = prompt_key("/v1/chat/completions", {"messages": messages}, block_chars=256, max_blocks=128)
        served[route(router, turn)] += 1
    assert max(served.values()) / (400 / len(NAMES)) <= 1.3
