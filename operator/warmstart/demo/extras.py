"""The project's ``bench`` extra (SGLang's router, that the demo compares against) in the demo's own environment.

:func:`requirements` reads the extra from pyproject.toml and :func:`missing` compares it with what is installed
(both pure but for the installed metadata); :func:`install` runs pip in this interpreter's environment, saying so.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess
import sys
import tomllib

PYPROJECT = pathlib.Path(__file__).resolve().parents[3] / "pyproject.toml"
EXTRA = "bench"


def requirements(pyproject: str, extra: str = EXTRA) -> list[str]:
    """The requirement strings of ``extra`` in the text of a pyproject.toml."""
    found: list[str] = tomllib.loads(pyproject)["project"]["optional-dependencies"][extra]
    return found


def pinned(requirement: str) -> tuple[str, str]:
    """(distribution name, pinned version or "") of a requirement string such as ``sglang-router==0.3.2``."""
    name, _, version = requirement.split(";")[0].strip().partition("==")
    return name.split("[")[0].strip(), version.strip()


def missing(required: list[str]) -> list[str]:
    """The requirements of ``required`` not installed here (at their pinned version, if pinned)."""
    absent = []
    for requirement in required:
        name, version = pinned(requirement)
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(requirement)
            continue
        if version and installed != version:
            absent.append(requirement)
    return absent


def install(pyproject: pathlib.Path = PYPROJECT) -> list[str]:
    """Install what the ``bench`` extra lists and this environment lacks; returns what it installed."""
    todo = missing(requirements(pyproject.read_text()))
    if not todo:
        return []
    command = [sys.executable, "-m", "pip", "install", "--quiet", *todo]
    print(f"    {' '.join(command)}", flush=True)
    subprocess.run(command, check=True)
    return todo
