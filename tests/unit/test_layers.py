"""The import contracts hold: controllers -> render -> api; render is pure; the router and preloader import only api.

The router and the preloader are separate programs in the operator's image: a module they import pulls its
dependencies into their start-up and its changes into their releases, so they may import only the API.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "warmstart"


def test_import_linter_contracts_are_kept() -> None:
    tool = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run([tool], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_router_and_preloader_contracts_name_every_other_part_of_warmstart() -> None:
    """A new package or top-level module must be forbidden to them too, or the contract silently lets it in."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    parts = {f"warmstart.{name}" for name in packages | modules}
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    for program in ("warmstart.router", "warmstart.preload"):
        contract = next(c for c in contracts if c["type"] == "forbidden" and c["source_modules"] == [program])
        assert set(contract["forbidden_modules"]) >= parts - {"warmstart.api", program}, program
