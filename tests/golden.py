"""Golden files: compare rendered text with a committed file; UPDATE_GOLDEN=1 rewrites the file instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def check_text(path: Path, text: str) -> None:
    """Assert `text` equals the golden file at `path` (or rewrite it under UPDATE_GOLDEN=1)."""
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from its golden file: review, then run with UPDATE_GOLDEN=1"


def check_manifests(directory: Path, name: str, manifests: list[dict[str, Any]]) -> None:
    """Assert manifests, dumped as a sorted multi-document YAML stream, equal `directory/name.yaml`."""
    check_text(directory / f"{name}.yaml", yaml.safe_dump_all(manifests, sort_keys=True))
