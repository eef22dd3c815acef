"""The demo's routing step: random vs prefixaware vs SGLang's router in front of 2 real llama.cpp engines.

It runs bench/routing.py ``--fleet llamacpp`` (bench/routing_llamacpp.py) on the host: two engine processes (the
engine image's own binary), each router in turn in front of them, both engines restarted with empty caches before
each router. The workload is sized so that one run takes about a minute and a half on 2 cores and its figures hold
from run to run: 48 requests, 6 shared documents of about 200 tokens with 8 questions each, sent by 2 clients in a
closed loop (the next request leaves when one is answered, so a busy machine slows the run instead of piling up a
queue), and prompt caches that hold about half of the documents each: enough for the documents a prefix-aware router
sends to an engine, too little for all of them.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[3]
ROUTERS = ("warmstart prefixaware", "warmstart random", "sglang cache_aware")
WORKLOAD = {
    "--groups": "6",
    "--per-group": "8",
    "--doc-words": "150",
    "--cache-ram": "16",
    "--concurrency": "2",
}


def command(results: pathlib.Path, python: str = sys.executable) -> list[str]:
    """bench/routing.py's command line for one run of the three routers, raw data to ``results``."""
    argv = [python, str(ROOT / "bench" / "routing.py"), "--fleet", "llamacpp", "--engines", "2", "--runs", "1"]
    argv += ["--llamacpp-workloads", "documents", "--skip-calibration", "--out", str(results.parent)]
    for flag, value in WORKLOAD.items():
        argv += [flag, value]
    return [*argv, "--routers", *ROUTERS, "--results", str(results)]


def run(results: pathlib.Path) -> dict[str, Any]:
    """Run the comparison (its own output goes to the terminal) and return its raw data."""
    subprocess.run(command(results), check=True)
    found: dict[str, Any] = json.loads(results.read_text())
    return found
