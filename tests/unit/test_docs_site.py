"""The documentation site's link check: a link to a repository file outside docs/ is followed, a broken one fails."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _site(tmp_path: pathlib.Path, page: str) -> subprocess.CompletedProcess[str]:
    """Build a one-page site whose page is `page`, in a repository of its own, with the project's hook."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(page)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "run.json").write_text("{}")
    (tmp_path / "README.md").write_text("# Home\n\nSee [the guide](docs/guide.md).\n")
    shutil.copy(ROOT / "scripts" / "mkdocs_hooks.py", tmp_path / "hooks.py")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ndocs_dir: docs\nstrict: true\nhooks: [hooks.py]\nnav: [index.md, guide.md]\n"
        "not_in_nav: |\n  /repo/**\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def test_a_link_to_committed_raw_data_is_published(tmp_path: pathlib.Path) -> None:
    built = _site(tmp_path, "# Guide\n\nFigures: [raw data](../data/run.json).\n")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "repo" / "data" / "run.json").read_text() == "{}"
    assert 'href="../repo/data/run.json"' in (tmp_path / "site" / "guide" / "index.html").read_text()


def test_a_link_to_a_missing_file_fails_the_build(tmp_path: pathlib.Path) -> None:
    built = _site(tmp_path, "# Guide\n\nFigures: [raw data](../data/missing.json).\n")
    assert built.returncode != 0
    assert "missing.json" in built.stdout + built.stderr
