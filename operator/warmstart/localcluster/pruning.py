"""Removing what older project builds left in the buildah store, keeping recent images and the current layer cache.

Each source change builds a new project image (~350 MB, most of it the venv layer) and, with ``--layers``, a chain
of intermediate images. Without pruning the store grows by ~450 MB per change. After a build this keeps the newest
:data:`KEEP` tags of the project and of the base (another checkout sharing the cache may still push its own), and every
intermediate image the build itself used or made (its ``-->`` lines), so the next build still hits the cache for
the dependency layer and the busybox stage. Dangling images outside that set go, repeatedly, because removing one
can leave its parent dangling.
"""

from __future__ import annotations

import json
import logging
import pathlib
import re
from collections.abc import Iterable
from typing import Any

from warmstart.localcluster import imagestore, stepping

logger = logging.getLogger(__name__)

KEEP = 3
#: build logs whose layers every sweep keeps: the engine image's compile takes long, and its layers let a build that
#: stopped halfway resume (an untagged layer would otherwise look like a leftover to a project build's sweep)
KEPT_LOGS = ("llamacpp-*.log",)
_STEP_IMAGE = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})\s*$", re.MULTILINE)


def used_image_ids(build_log: str) -> set[str]:
    """ID prefixes of every image a ``buildah bud --layers`` run reused or committed, from its output."""
    return set(_STEP_IMAGE.findall(build_log))


def kept_image_ids(logs: pathlib.Path) -> set[str]:
    """ID prefixes of the layers that the builds logged as :data:`KEPT_LOGS` in ``logs`` reused or committed."""
    return {
        image
        for pattern in KEPT_LOGS
        for log in logs.glob(pattern)
        for image in used_image_ids(log.read_text(errors="replace"))
    }


def stale_tags(tags: list[tuple[str, int]], current: str, newest: int) -> list[str]:
    """Tags of ``current``'s repository to remove: all but ``current`` and the ``newest`` most recently created."""
    repository = current.rsplit(":", 1)[0]
    mine = sorted((item for item in tags if item[0].rsplit(":", 1)[0] == repository), key=lambda item: -item[1])
    recent = {name for name, _ in mine[:newest]}
    return [name for name, _ in mine if name != current and name not in recent]


def prune(store: imagestore.Store, current: Iterable[str], build_log: pathlib.Path, sweep: bool = True) -> int:
    """Untag stale tags of each current reference's repository, then (``sweep``) drop unused dangling images; count
    them."""
    buildah = store.buildah()
    tags = _tags(store)
    removed = 0
    for reference in current:
        for name in stale_tags(tags, reference, KEEP):
            if stepping.succeeds([*buildah, "rmi", name]):
                removed += 1
    used = used_image_ids(build_log.read_text(errors="replace")) if build_log.is_file() else set()
    used |= kept_image_ids(build_log.parent)
    progress = sweep
    while progress:  # an image a container still uses (an ongoing `image run`) stays; its rmi fails alone
        dangling = stepping.output([*buildah, "images", "--filter", "dangling=true", "--quiet", "--no-trunc"]).split()
        doomed = [image for image in dangling if not any(image.removeprefix("sha256:").startswith(u) for u in used)]
        gone = sum(stepping.succeeds([*buildah, "rmi", image]) for image in doomed)
        removed += gone
        progress = gone > 0
    if removed:
        logger.info("image store: removed %d images left by older builds", removed)
    return removed


def _tags(store: imagestore.Store) -> list[tuple[str, int]]:
    """``(name:tag, created)`` of every tagged image (``created`` in Unix seconds)."""
    listed: list[dict[str, Any]] = json.loads(stepping.output([*store.buildah(), "images", "--json"]) or "[]")
    return [(name, int(image.get("created", 0))) for image in listed for name in image.get("names") or ()]
