"""The CI share of the chaos suite's router faults (chaos/chaos_router.py; `make chaos` runs 10,000 requests).

Two batches of 500 requests with client disconnects (before headers, mid-body, mid-stream), a backend that hangs,
one that dies mid-stream, replicas killed and replaced, and backend/strategy churn: every in-flight counter returns
to 0, no request outlives its deadline, memory stays within its bound.
"""

from __future__ import annotations

import time

import chaos_router
from chaos_report import failures


async def test_a_thousand_requests_under_faults_leave_nothing_in_flight() -> None:
    runs = await chaos_router.run_batches(2, 500, seed=5, deadline=time.monotonic() + 150, report=lambda run: None)
    assert len(runs) == 2
    assert all(run.ok for run in runs), "\n".join(failures(runs))
