"""Writing TOML (containerd's config.toml and hosts.toml) from nested dicts, so no config is built with f-strings.

Covers what those files use: tables, strings, booleans, integers and arrays of scalars. The standard
library reads TOML (``tomllib``) but does not write it; the unit tests read every output back with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

Scalar = str | bool | int
Value = Scalar | Sequence[Scalar] | Mapping[str, "Value"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(document: Mapping[str, Value]) -> str:
    """The TOML text of ``document``: a table's plain keys first, then its sub-tables with ``[dotted.headers]``."""
    lines: list[str] = []
    _table(document, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(table: Mapping[str, Value], path: tuple[str, ...], lines: list[str]) -> None:
    plain = [(key, value) for key, value in table.items() if not isinstance(value, Mapping)]
    nested = [(key, value) for key, value in table.items() if isinstance(value, Mapping)]
    if path and (plain or not nested):
        lines.append("")
        lines.append(f"[{'.'.join(_key(part) for part in path)}]")
    for key, scalar in plain:
        lines.append(f"{_key(key)} = {_value(scalar)}")
    for key, sub in nested:
        assert isinstance(sub, Mapping)
        _table(sub, (*path, key), lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes (\" \\ \n \uXXXX) are valid in TOML basic strings
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
