"""The chaos suite's table: percentiles, one row per scenario, broken runs listed, the table spliced into the doc."""

from __future__ import annotations

from chaos_report import BEGIN, END, Run, percentile, rows, splice, table


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_rows_count_runs_convergence_and_leaks_per_scenario() -> None:
    runs = [
        Run("a", 0, True, 1.0),
        Run("a", 1, False, 9.0, leaks=["node x: label"]),
        Run("b", 0, True, 2.0, violations=["hung"]),
    ]
    found = rows(runs)
    assert [(r.scenario, r.runs, r.converged, r.p50, r.leaks, r.violations) for r in found] == [
        ("a", 2, 1, 1.0, 1, 0),
        ("b", 1, 1, 2.0, 0, 1),
    ]
    assert "| a | 2 | 1 | 1.0 s | 1.0 s | 1 | 0 |" in table(found)
    assert not runs[1].ok and not runs[2].ok and runs[0].ok


def test_splice_replaces_only_the_marked_block() -> None:
    doc = f"intro\n{BEGIN}\nold\n{END}\nafter\n"
    assert splice(doc, "new") == f"intro\n{BEGIN}\nnew\n{END}\nafter\n"
    assert splice("intro\n", "new").endswith(f"{BEGIN}\nnew\n{END}\n")
