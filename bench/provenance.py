"""What every committed benchmark result records: the command, the commit, the cores and the load average."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def commit() -> str:
    """The commit of this tree, with ``-dirty`` when it has uncommitted changes to tracked files."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"], capture_output=True)
    return head.stdout.strip() + ("-dirty" if dirty.returncode else "")


@dataclasses.dataclass(frozen=True)
class Start:
    """What is known when a run starts: the tree it runs and the machine's load then."""

    commit: str
    load_average: tuple[float, float, float]


def start() -> Start:
    """Call first thing in a run: the commit is read before anyone edits the tree during a long run."""
    return Start(commit(), os.getloadavg())


def header(started: Start) -> dict[str, Any]:
    """The provenance fields of one run, to be merged into its JSON (call at the end of the run)."""
    return {
        "command": " ".join(["python", *sys.argv]),
        "commit": started.commit,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": {
            "start": [round(x, 2) for x in started.load_average],
            "end": [round(x, 2) for x in os.getloadavg()],
        },
    }


def write(name: str, started: Start, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<today>-<name>.json``: the provenance header, then ``payload``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.date.today()}-{name}.json"
    path.write_text(json.dumps({**header(started), **payload}, indent=2, default=str) + "\n")
    return path
