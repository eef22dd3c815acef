"""The CI share of the chaos suite's router-sync fault (chaos/chaos_routersync.py): one of three synced routers
SIGKILLed under load; only its own requests fail, and the survivors stop counting its in-flight requests (the suite
also holds that to a time bound; CI does not time it)."""

from __future__ import annotations

import chaos_routersync
from chaos_report import failures


async def test_a_killed_synced_router_fails_only_its_own_requests() -> None:
    run = await chaos_routersync.run_once(seed=7, requests=400, report=lambda run: None, timed=False)
    assert run.ok and not run.violations, "\n".join(failures([run]))
    assert "failed with the killed router" in run.note
