"""The test tree stays collectable as one session: test and helper modules are imported by basename."""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    """Test modules are imported by basename (tests/ holds no packages): a repeated name fails collection."""
    names = collections.Counter(p.name for p in TESTS.rglob("*.py") if p.name not in ("conftest.py", "__init__.py"))
    assert [name for name, count in names.items() if count > 1] == []


#: fixtures (tests/conftest.py) that need a binary built from Go modules: the control plane, the real node or helm
_BINARY_FIXTURES = {"cluster", "api_client", "namespace", "real_clusters", "real_cluster", "real_api_client", "helm"}


def _pytest(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a child process with an empty binary cache and no Go toolchain on PATH: a build would fail it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": str(pathlib.Path(sys.executable).parent)}
    env.pop("WARMSTART_KUBECONFIG", None)
    env.pop("WARMSTART_REAL_KUBECONFIG", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(command, cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=300)


def test_collecting_every_test_builds_nothing(tmp_path: pathlib.Path) -> None:
    collected = _pytest(tmp_path, "--collect-only", "tests")
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    assert "building the local cluster" not in collected.stdout
    assert not (tmp_path / "cache" / "warmstart").exists()


def test_no_unit_test_needs_a_built_binary(tmp_path: pathlib.Path) -> None:
    """tests/unit runs on a machine with no cluster binaries and no Go: its tests request no fixture that builds."""
    listed = _pytest(tmp_path, "--fixtures-per-test", "tests/unit")
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    used = set(re.findall(r"^(\w+) -- ", listed.stdout, flags=re.MULTILINE))
    assert used, "pytest --fixtures-per-test listed no fixture: the check reads nothing"
    assert used & _BINARY_FIXTURES == set()
