"""Progress lines: bytes done of total, throughput without the bytes kept from an earlier run, ETA; a bar on a TTY."""

from __future__ import annotations

import io

from warmstart.preload import progress


def test_log_line_and_bar() -> None:
    meter = progress.Progress(4 << 30, stream=io.StringIO(), tty=False, already=1 << 30)
    meter.add(1 << 30)
    line = meter.line()
    assert line.startswith("progress: 2.0 GiB / 4.0 GiB (50.0%) at ") and "ETA" in line
    meter.tty = True
    assert meter.line().startswith("[###############...............] 2.0 GiB")


def test_context_writes_a_final_line() -> None:
    out = io.StringIO()
    with progress.Progress(10, stream=out, tty=False, interval=60) as meter:
        meter.add(10)
    assert "10 B / 10 B (100.0%)" in out.getvalue()


def test_human() -> None:
    assert [progress.human(n) for n in (5, 2048, 3 << 30)] == ["5 B", "2.0 KiB", "3.0 GiB"]
