"""The routing core's own rules, checked in Rust: ``cargo test`` over routing-core/ (hashing, indexes, events, pick).

The Rust tests state the documented rules on hand-made inputs without Python; the Python tests beside
this one check the same core through the extension the router imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_cargo_test_passes() -> None:
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    result = subprocess.run(
        [cargo, "test", "--release", "--locked", "--manifest-path", str(ROOT / "routing-core" / "Cargo.toml")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "CARGO_TERM_COLOR": "never"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "test result: ok" in result.stdout
