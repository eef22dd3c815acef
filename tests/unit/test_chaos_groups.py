"""`make chaos` (chaos/run.py) fails, and says which, when a group it was asked for did not run."""

from __future__ import annotations

import pathlib

import pytest

import run as chaos_run


def test_a_group_that_did_not_run_is_named_and_fails_the_suite(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a budget shorter than the reserve for a run in flight: no group may start
    args = ["--only", "preload", "--budget", "1", "--out", str(tmp_path), "--no-doc"]
    assert chaos_run.main(args) == 1
    out = capsys.readouterr().out
    assert "NOT RUN: the preload group was asked for and did not run: the budget was spent" in out, out


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(SystemExit) as refused:
        chaos_run.main(["--only", "preload,nosuchgroup"])
    assert refused.value.code == 2
