"""The CI share of the chaos suite's preload faults (chaos/chaos_preload.py; `make chaos` runs the full counts).

A few seeds of: kill -9 at a random byte offset then a resume, ENOSPC from another writer on a small tmpfs, and S3
faults through the fault-injecting proxy (transient 5xx, bodies cut short, a store that answers 503 to everything, a
403). Each run checks its invariants: nothing published incomplete, a kill counts only when it landed before the
preload completed, the rerun took the resume path (it kept bytes of the killed run) and publishes exactly the uploaded
bytes, the reason and its retryable flag are the right ones, nothing left behind.
"""

from __future__ import annotations

import pathlib
import shutil
import time
from collections.abc import Iterator

import pytest

import chaos_preload
from chaos_report import Run, failures


@pytest.fixture(scope="module")
def bench() -> Iterator[chaos_preload.Bench]:
    made = chaos_preload.Bench(seed=3)
    yield made
    made.close()


def _ok(runs: list[Run], expected: int) -> None:
    assert len(runs) == expected
    assert all(run.ok for run in runs), "\n".join(failures(runs))


def test_kill_9_at_random_offsets_then_resume(bench: chaos_preload.Bench) -> None:
    _ok(list(chaos_preload.kill_runs(bench, 2, seed=3, deadline=time.monotonic() + 300)), 2)


def test_a_rerun_that_did_not_resume_is_a_violation(
    bench: chaos_preload.Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume check can fail: the killed run's staging removed before the rerun, so it downloads afresh."""
    kill_at = chaos_preload._kill_at

    def then_wipe(
        bench: chaos_preload.Bench, bucket: str, key: str, root: pathlib.Path, offset: int
    ) -> tuple[bool, int, list[str]]:
        landed = kill_at(bench, bucket, key, root, offset)
        shutil.rmtree(root / "warmstart" / "keys" / key / ".staging")
        return landed

    monkeypatch.setattr(chaos_preload, "_kill_at", then_wipe)
    (run,) = chaos_preload.kill_runs(bench, 1, seed=4, deadline=time.monotonic() + 300)
    assert run.converged and run.violations == ["the rerun did not resume: it kept 0 B of the killed run's download"]


def test_enospc_mid_download_is_retryable_and_leaves_nothing(bench: chaos_preload.Bench) -> None:
    _ok(list(chaos_preload.enospc_runs(bench, 1, seed=3, deadline=time.monotonic() + 300)), 1)


def test_s3_faults_are_classified_and_never_publish_an_incomplete_cache(
    bench: chaos_preload.Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    picked = [f for f in chaos_preload.S3_FAULTS if (f[0], f[2]) in {("cut", False), ("503", True)}]
    picked += [f for f in chaos_preload.S3_FAULTS if f[0] == "403"]
    monkeypatch.setattr(chaos_preload, "S3_FAULTS", picked)
    _ok(list(chaos_preload.s3_runs(bench, len(picked), seed=3, deadline=time.monotonic() + 300)), len(picked))
