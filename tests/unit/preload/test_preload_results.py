"""Reasons, exit codes and the termination message: the contract the operator reads."""

from __future__ import annotations

import json
from pathlib import Path

from warmstart.api import preloading
from warmstart.api.preloading import Reason, Result
from warmstart.preload import results


def test_every_reason_has_one_exit_code_and_failures_are_distinct() -> None:
    codes = {reason: preloading.exit_code(reason) for reason in Reason}
    assert {codes[r] for r in preloading.SUCCESS_REASONS} == {0}
    assert codes[Reason.NETWORK_ERROR] == preloading.EXIT_RETRYABLE == 75
    permanent = [codes[r] for r in Reason if r not in preloading.SUCCESS_REASONS | preloading.RETRYABLE_REASONS]
    assert len(permanent) == len(set(permanent)) and 0 not in permanent and 75 not in permanent and 2 not in permanent
    assert all(
        preloading.REASON_BY_EXIT_CODE[codes[r]] == r
        for r in Reason
        if r not in preloading.SUCCESS_REASONS | preloading.RETRYABLE_REASONS
    )
    assert all(codes[r] == 75 for r in preloading.RETRYABLE_REASONS)


def test_termination_message_round_trips(tmp_path: Path) -> None:
    result = Result(Reason.INSUFFICIENT_CAPACITY, "needs 300 GB", bytes=3, seconds=1.23456, files=2, kept=1)
    path = tmp_path / "termination-log"
    assert results.write_termination_log(str(path), result)
    body = json.loads(path.read_text())
    assert body == {
        "outcome": "Failed",
        "reason": "InsufficientCapacity",
        "message": "needs 300 GB",
        "bytes": 3,
        "seconds": 1.235,
        "files": 2,
        "kept": 1,
        "retryable": False,
    }
    assert preloading.parse(path.read_text()) == Result(Reason.INSUFFICIENT_CAPACITY, "needs 300 GB", 3, 1.235, 2, 1)
    assert preloading.parse("not json") is None


def test_no_termination_log_outside_a_pod(tmp_path: Path) -> None:
    assert not results.write_termination_log(
        str(tmp_path / "no-such-dir" / "termination-log"), Result(Reason.DOWNLOADED, "")
    )


def test_retryable_is_only_network_trouble_a_disk_that_filled_up_and_a_tampered_cache() -> None:
    retryable = {Reason.NETWORK_ERROR, Reason.DISK_FULL, Reason.CACHE_TAMPERED}
    assert all(preloading.is_retryable(r.value) for r in retryable)
    assert not any(preloading.is_retryable(r.value) for r in Reason if r not in retryable)
