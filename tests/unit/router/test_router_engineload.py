"""Engine-reported load: vLLM's and llama.cpp's metric names, and own picks until a scrape reflects them."""

from __future__ import annotations

from warmstart.router.engineload import EngineLoads, parse

VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3.0
vllm:num_requests_running{model_name="m",engine="1"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
"""

LLAMACPP = """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 4
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
"""


def test_vllm_and_llamacpp_names() -> None:
    vllm = parse(VLLM, 1.0)
    assert vllm is not None and (vllm.running, vllm.waiting, vllm.kv_usage) == (4.0, 2.0, 0.25)
    old = parse(VLLM.replace("kv_cache_usage_perc", "gpu_cache_usage_perc"), 1.0)
    assert old is not None and old.kv_usage == 0.25
    llama = parse(LLAMACPP, 1.0)
    assert llama is not None and (llama.running, llama.waiting, llama.kv_usage) == (1.0, 4.0, None)
    assert parse("# nothing\nother_metric 1\n", 1.0) is None


def test_own_picks_count_until_a_later_scrape() -> None:
    loads = EngineLoads(max_age_seconds=5.0)
    assert loads.load("a", 0.0) is None
    loads.update("a", parse(LLAMACPP, 10.0))
    loads.picked("a", 10.5)
    loads.picked("a", 11.5)
    assert loads.load("a", 12.0) == 7.0
    loads.update("a", parse(LLAMACPP, 11.0))  # started after the first pick only
    assert loads.load("a", 12.0) == 6.0
    assert loads.load("a", 16.5) is None  # stale: the policy falls back to in-flight counts


def test_served_counter_gives_a_recent_rate_every_router_reads_alike() -> None:
    loads = EngineLoads()

    def text(served: int) -> str:
        return (
            VLLM
            + f'# TYPE vllm:request_success counter\nvllm:request_success_total{{finished_reason="stop"}} {served}\n'
        )

    loads.update("a", parse(text(100), 1.0))
    assert loads.rate("a") is None
    loads.update("a", parse(text(110), 2.0))
    assert loads.rate("a") == 10.0
    loads.update("a", parse(text(110), 3.0))
    rate = loads.rate("a")
    assert rate is not None and 0.0 < rate < 10.0
    assert parse(LLAMACPP, 1.0) is not None and parse(LLAMACPP, 1.0).served is None  # type: ignore[union-attr]
