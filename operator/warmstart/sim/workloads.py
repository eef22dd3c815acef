"""Workload generators for the routing benchmark and the demo: shared prefixes, hot prefix, multi-turn chat.

Text is random three-letter words plus a space, so one word is exactly one simulated token
(4 characters). Everything is seeded: the same arguments give the same requests. Arrival
times are in model seconds from the start of the run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from warmstart.sim.engine import EngineParams

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def words(rng: random.Random, tokens: int) -> str:
    """``tokens`` random three-letter words, each followed by a space (4 chars = 1 token)."""
    return "".join(rng.choice(_LETTERS) + rng.choice(_LETTERS) + rng.choice(_LETTERS) + " " for _ in range(tokens))


@dataclass(frozen=True)
class Request:
    """One open-loop request."""

    at: float
    """Arrival time, model seconds from the start."""
    group: str
    """The prefix group it belongs to (for hit and movement accounting)."""
    path: str
    body: dict[str, Any]


@dataclass
class Conversation:
    """One closed-loop chat user: each round is sent after the previous reply plus think time."""

    user: str
    start_at: float
    system: str
    questions: list[str]
    output_tokens: int
    think_s: float
    history: list[dict[str, str]] = field(default_factory=list)


def rate_for_load(load: float, replicas: int, params: EngineParams, prompt_tokens: int) -> float:
    """Arrivals per model second that keep the fleet's prefill at ``load`` with no cache hits."""
    return load * replicas * params.prefill_tokens_per_s / prompt_tokens


def _poisson_times(rng: random.Random, count: int, rate: float) -> list[float]:
    now, times = 0.0, []
    for _ in range(count):
        now += rng.expovariate(rate)
        times.append(now)
    return times


def shared_prefix(
    *,
    groups: int = 64,
    per_group: int = 16,
    system_tokens: int = 2048,
    question_tokens: int = 128,
    output_tokens: int = 256,
    rate: float,
    hot_share: float = 0.0,
    seed: int = 1,
) -> list[Request]:
    """SGLang's generated-shared-prefix: ``groups`` system prompts x ``per_group`` questions, shuffled,
    Poisson arrivals. With ``hot_share`` > 0, group 0 carries that share of all requests."""
    rng = random.Random(seed)
    systems = [words(rng, system_tokens) for _ in range(groups)]
    total = groups * per_group
    if hot_share > 0:
        hot = int(total * hot_share)
        picks = [0] * hot + [1 + i % (groups - 1) for i in range(total - hot)]
    else:
        picks = [i % groups for i in range(total)]
    rng.shuffle(picks)
    times = _poisson_times(rng, total, rate)
    return [
        Request(
            at=at,
            group=f"g{group}",
            path="/v1/completions",
            body={
                "model": "sim-llm",
                "prompt": systems[group] + words(rng, question_tokens),
                "max_tokens": output_tokens,
                "stream": True,
                "ignore_eos": True,
            },
        )
        for at, group in zip(times, picks, strict=True)
    ]


def multi_turn(
    *,
    users: int = 10,
    rounds: int = 5,
    system_tokens: int = 2048,
    question_tokens: int = 128,
    output_tokens: int = 128,
    think_s: float = 2.0,
    spread_s: float = 5.0,
    seed: int = 2,
) -> list[Conversation]:
    """Chat users sharing one system prompt, each with a growing history of their own."""
    rng = random.Random(seed)
    system = words(rng, system_tokens)
    return [
        Conversation(
            user=f"u{i}",
            start_at=rng.uniform(0, spread_s),
            system=system,
            questions=[words(rng, question_tokens) for _ in range(rounds)],
            output_tokens=output_tokens,
            think_s=think_s,
        )
        for i in range(users)
    ]


def chat_body(conversation: Conversation, round_index: int) -> dict[str, Any]:
    """The request for ``round_index``: system prompt, the history so far, the next question."""
    messages = [
        {"role": "system", "content": conversation.system},
        *conversation.history,
        {"role": "user", "content": conversation.questions[round_index]},
    ]
    return {
        "model": "sim-llm",
        "messages": messages,
        "max_tokens": conversation.output_tokens,
        "stream": True,
        "user": conversation.user,
    }
