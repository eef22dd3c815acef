"""The demo's pure parts: the figures it reads from the benchmarks' raw data, their goals, the closing table, the
routing step's command line and the bench extra it installs."""

from __future__ import annotations

import math
import pathlib
from typing import Any

from warmstart.demo import comparing, extras, summary


def _row(**medians: float) -> dict[str, dict[str, float]]:
    return {key: {"median": value, "min": value, "max": value} for key, value in medians.items()}


Triple = tuple[float, float, float]


def _routing(p50: Triple, p99: Triple, hits: Triple) -> dict[str, Any]:
    labels = (summary.PREFIXAWARE, summary.RANDOM, summary.SGLANG)
    return {
        "summary": {
            "documents": {
                label: _row(ttft_p50=a, ttft_p99=b, hit_ratio=h)
                for label, a, b, h in zip(labels, p50, p99, hits, strict=True)
            }
        }
    }


def test_scaleout_is_met_when_warm_is_at_most_0_4_of_cold_and_missed_above() -> None:
    report = {"medians": {summary.WARM_CONFIG: {"ready_s": 3.3}, summary.COLD_CONFIG: {"ready_s": 18.7}}}
    [figure] = summary.scaleout(report)
    assert figure.met is True and figure.verdict == "met"
    assert "3.3 s vs 18.7 s (0.18x)" in figure.value
    report["medians"][summary.WARM_CONFIG]["ready_s"] = 9.0
    assert summary.scaleout(report)[0].met is False


def test_a_figure_not_measured_has_no_verdict() -> None:
    [figure] = summary.scaleout({})
    assert figure.met is None and figure.verdict == "-"
    assert all(f.met is None for f in summary.routing({}))


def test_routing_goals_p50_against_random_p99_against_sglang_and_hit_ratio() -> None:
    figures = summary.routing(_routing((0.2, 2.0, 0.3), (5.0, 9.0, 6.0), (0.75, 0.40, 0.78)))
    p50, p99, hits = figures
    assert p50.met is True and "(0.10x)" in p50.value  # 0.2 / 2.0 <= 0.3
    assert p99.met is True and "(0.83x)" in p99.value  # 5 / 6 <= 1
    assert hits.met is True and hits.value == "0.75, 0.40, 0.78"  # within 0.05 of SGLang's
    missed = summary.routing(_routing((0.9, 2.0, 0.3), (7.0, 9.0, 6.0), (0.60, 0.40, 0.78)))
    assert [f.met for f in missed] == [False, False, False]
    assert summary.missed(missed) == missed


def test_prompt_cache_goal_and_the_engines_counts() -> None:
    figure = summary.prompt_cache(4640.0, 27.0, 829, 830)
    assert figure.met is True and "829/830 tokens reused" in figure.value
    assert summary.prompt_cache(100.0, 50.0, 10, 20).met is False
    assert summary.prompt_cache(0.0, 50.0, 10, 20).met is None


def test_duration_goal_depends_on_whether_the_caches_were_warm() -> None:
    assert summary.duration(7.5 * 60, caches_warm=True).met is True
    warm = summary.duration(9 * 60, caches_warm=True)
    assert warm.met is False and warm.goal == "<= 8 min (caches warm)"
    cold = summary.duration(24 * 60, caches_warm=False)
    assert cold.met is True and "25 min" in cold.goal


def test_preload_and_completion() -> None:
    assert summary.preload(2**30, 4.2, True).value == "1.00 GiB in 4.2 s"
    assert summary.preload(2**30, 4.2, False).met is False
    assert summary.completion("the primary colors").met is True
    assert summary.completion("").met is False


def test_render_aligns_columns_and_marks_every_verdict() -> None:
    figures = [
        summary.Figure("scale-out", "a", "1 s", "<= 2 s", True),
        summary.Figure("routing", "a longer figure", "3 s", "<= 2 s", False),
        summary.Figure("engine", "b", "-", "an answer", None),
    ]
    lines = summary.render(figures).splitlines()
    assert lines[0].startswith("STEP") and len(lines) == 4
    assert lines[1].endswith("met") and lines[2].endswith("MISSED") and lines[3].endswith("-")
    column = lines[0].index("MEASURED")
    assert all(line[column - 2 : column] == "  " for line in lines)
    assert all(line == line.rstrip() for line in lines)


def test_ratio_of_nothing_is_not_a_number() -> None:
    assert math.isnan(summary.ratio(1.0, 0.0))
    assert summary.at_most(math.nan, 1.0) is None


def test_the_routing_step_runs_the_three_routers_once_on_two_engines_in_a_closed_loop() -> None:
    argv = comparing.command(pathlib.Path("/tmp/out.json"), python="py")
    assert argv[:2] == ["py", str(comparing.ROOT / "bench" / "routing.py")]
    assert argv[argv.index("--fleet") + 1] == "llamacpp" and argv[argv.index("--runs") + 1] == "1"
    assert argv[argv.index("--engines") + 1] == "2" and argv[argv.index("--concurrency") + 1] == "2"
    start = argv.index("--routers") + 1
    assert tuple(argv[start : start + 3]) == comparing.ROUTERS
    assert argv[-2:] == ["--results", "/tmp/out.json"]


def test_the_bench_extra_is_read_from_pyproject_and_checked_against_installed_versions() -> None:
    text = '[project]\nname = "x"\n[project.optional-dependencies]\nbench = ["sglang-router==0.3.2"]\n'
    assert extras.requirements(text) == ["sglang-router==0.3.2"]
    assert extras.pinned("sglang-router==0.3.2") == ("sglang-router", "0.3.2")
    assert extras.pinned("pkg[extra]; python_version > '3'") == ("pkg", "")
    assert extras.missing(["no-such-distribution-here==1.0"]) == ["no-such-distribution-here==1.0"]
    assert extras.missing(["pyyaml==0.0.1"]) == ["pyyaml==0.0.1"]  # installed, at another version
    assert extras.missing(["pyyaml"]) == []
    assert extras.requirements(extras.PYPROJECT.read_text())  # the project's own extra exists
