"""The test tree stays collectable as one session: test and helper modules are imported by basename."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    """Test modules are imported by basename (tests/ holds no packages): a repeated name fails collection."""
    names = collections.Counter(p.name for p in TESTS.rglob("*.py") if p.name not in ("conftest.py", "__init__.py"))
    assert [name for name, count in names.items() if count > 1] == []
