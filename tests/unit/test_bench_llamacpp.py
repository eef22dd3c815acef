"""bench/routing_llamacpp.py's arithmetic: the engine-measured hit ratio, the request share, and the conversion of
the engines' timings into `warmstart sim`'s constants. The bench itself runs real engines and is not a test."""

from __future__ import annotations

import argparse
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))

import routing_llamacpp as bench


def _sample(engine: str, prompt_n: int, cache_n: int, ttft: float | None = 0.1, **extra: float) -> bench.Sample:
    return bench.Sample("documents", 0, 0.0, ttft, engine, prompt_n, cache_n, **extra)


def test_the_hit_ratio_is_reused_over_all_prompt_tokens_as_the_engines_report_them() -> None:
    samples = [_sample("e0", 1000, 0), _sample("e0", 10, 990), _sample("e1", 500, 500), _sample("", 0, 0, None)]
    summary = bench.summarize(samples, engines=2)
    assert summary["hit_ratio"] == pytest.approx(1490 / 3000)
    assert summary["errors"] == 1
    assert summary["max_mean_share"] == pytest.approx(2 / 1.5)


def test_an_engine_that_served_nothing_counts_in_the_share() -> None:
    summary = bench.summarize([_sample("e0", 10, 0), _sample("e0", 10, 0)], engines=2)
    assert summary["max_mean_share"] == pytest.approx(2.0)


def test_the_documents_workload_is_the_same_for_every_router_and_shares_each_document() -> None:
    one = bench.documents_workload(groups=3, per_group=4, words=50, seed=1)
    assert one == bench.documents_workload(groups=3, per_group=4, words=50, seed=1)
    assert len(one) == 12
    for group in range(3):
        prompts = [prompt for g, prompt in one if g == group]
        assert len(prompts) == 4 and len({p.split("Question")[0] for p in prompts}) == 1


def test_sim_constants_come_from_the_engines_timings_in_the_simulators_tokens() -> None:
    args = argparse.Namespace(cache_ram=64, ctx_size=4096)
    # 400 characters per prompt of 200 real tokens: the simulator counts 100 tokens for each (half as many)
    samples = [
        _sample("e0", 200, 0, prompt_ms=400.0, predicted_per_second=50.0, chars=400),
        _sample("e1", 10, 190, prompt_ms=20.0, predicted_per_second=50.0, chars=400),
    ]
    params = bench.sim_params(samples, args)
    assert params["sim_tokens_per_real_token"] == pytest.approx(0.5)
    assert params["prefill_tokens_per_s"] == pytest.approx(500.0 * 0.5)  # 200 tokens in 0.4 s, the miss only
    assert params["decode_tokens_per_s"] == pytest.approx(25.0)
    assert params["ttft_overhead_s"] == pytest.approx(0.02)
    expected_cache = (64 * 2**20 / bench.KV_BYTES_PER_TOKEN + 4096) * 0.5
    assert params["cache_tokens"] == int(expected_cache)


def test_the_calibration_error_is_relative_for_ttft_and_absolute_for_the_hit_ratio() -> None:
    def row(p50: float, p95: float, hit: float) -> dict[str, dict[str, float]]:
        return {"ttft_p50": {"median": p50}, "ttft_p95": {"median": p95}, "hit_ratio": {"median": hit}}

    errors = bench.calibration_errors({"r": row(1.0, 2.0, 0.8)}, {"r": row(1.5, 1.0, 0.7), "other": row(1, 1, 1)})
    assert errors == {"r": {"ttft_p50": 0.5, "ttft_p95": -0.5, "hit_ratio_difference": pytest.approx(-0.1)}}
