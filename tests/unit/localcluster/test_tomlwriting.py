"""containerd reads what tomlwriting writes: every output parses back to the same data."""

from __future__ import annotations

import tomllib

import pytest

from warmstart.localcluster import tomlwriting


def test_nested_tables_with_dotted_keys_round_trip() -> None:
    document = {
        "version": 2,
        "root": "/var/lib/x",
        "disabled_plugins": ["a.b", "c"],
        "plugins": {
            "io.containerd.grpc.v1.cri": {
                "restrict_oom_score_adj": True,
                "containerd": {"runtimes": {"runc": {"options": {"SystemdCgroup": False}}}},
            }
        },
    }
    assert tomllib.loads(tomlwriting.dumps(document)) == document


def test_strings_with_quotes_backslashes_and_newlines_survive() -> None:
    document = {"s": 'a "quoted" \\ path\nsecond line', "host": {"http://127.0.0.1:5000": {"capabilities": ["pull"]}}}
    assert tomllib.loads(tomlwriting.dumps(document)) == document


def test_empty_table_is_kept() -> None:
    assert tomllib.loads(tomlwriting.dumps({"grpc": {}})) == {"grpc": {}}


def test_unsupported_value_is_refused() -> None:
    with pytest.raises(TypeError):
        tomlwriting.dumps({"x": 1.5})  # type: ignore[dict-item]
