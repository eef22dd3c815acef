"""mkdocs hooks: README.md is the site's home page, and links from the docs to repository files are checked too.

mkdocs only knows files under `docs/`. README.md links to `docs/x.md`, and the docs link to committed raw data,
examples and charts with `../bench/results/...`. This hook makes README the index page (its `docs/` prefix dropped)
and copies every linked repository file into the site under `repo/`, rewriting the link to it. A link to a file that
does not exist is left as it is, so `mkdocs build --strict` fails on it as on any broken link.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

#: Markdown links and images: `[text](target)`; a target has no spaces (the docs never use angle brackets).
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
REPO_PREFIX = "repo/"


def _repo_root(config: MkDocsConfig) -> pathlib.Path:
    return pathlib.Path(config.docs_dir).resolve().parent


def _split(target: str) -> tuple[str, str]:
    path, hash_mark, anchor = target.partition("#")
    return path, hash_mark + anchor


def _is_external(target: str) -> bool:
    return target.startswith(("http://", "https://", "mailto:", "#")) or "://" in target


def _repo_file(config: MkDocsConfig, base: pathlib.Path, target: str) -> pathlib.Path | None:
    """The repository file (or directory) a relative link outside docs/ names, if it exists."""
    path, _ = _split(target)
    if not path or _is_external(target):
        return None
    resolved = (base / path).resolve()
    root = _repo_root(config)
    docs = pathlib.Path(config.docs_dir).resolve()
    if resolved.is_relative_to(docs) or not resolved.is_relative_to(root) or not resolved.exists():
        return None
    return resolved


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """README.md becomes index.md; every repository file a page links to is added under `repo/`."""
    root = _repo_root(config)
    readme = (root / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "index.md", content=readme))
    linked: set[pathlib.Path] = set()
    sources = [(root / "README.md", root)] + [
        (pathlib.Path(file.abs_src_path), pathlib.Path(file.abs_src_path).parent)
        for file in files
        if file.abs_src_path and file.src_uri.endswith(".md")
    ]
    for source, base in sources:
        for match in LINK.finditer(source.read_text(encoding="utf-8")):
            found = _repo_file(config, base, match.group(2))
            if found is None or found == root / "README.md":
                continue
            candidates = sorted(p for p in found.rglob("*") if p.is_file()) if found.is_dir() else [found]
            linked.update(candidates)
    for path in sorted(linked):
        files.append(File.generated(config, REPO_PREFIX + path.relative_to(root).as_posix(), abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, **_: Any) -> str:
    """Point links at README's `docs/` pages and at the copied repository files."""
    root = _repo_root(config)
    is_index = page.file.src_uri == "index.md"
    base = root if is_index else pathlib.Path(page.file.abs_src_path or config.docs_dir).parent
    depth = 0 if is_index else page.file.src_uri.count("/")

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        path, anchor = _split(target)
        if is_index and path.startswith("docs/"):
            return match.group(1) + path.removeprefix("docs/") + anchor + match.group(3)
        found = _repo_file(config, base, target)
        if found is None:
            return match.group(0)
        relative = found.relative_to(root).as_posix()
        if found.is_dir():
            # a folder: link to its README when it has one, else to its first file
            readme = found / "README.md"
            inner = readme if readme.exists() else min(p for p in found.rglob("*") if p.is_file())
            relative = inner.relative_to(root).as_posix()
        if relative == "README.md":
            return match.group(1) + "../" * depth + "index.md" + anchor + match.group(3)
        return match.group(1) + "../" * depth + REPO_PREFIX + relative + anchor + match.group(3)

    return LINK.sub(rewrite, markdown)
