"""One exclusive file lock between processes of this machine, saying so when it has to wait for another holder."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import pathlib
from collections.abc import Iterator

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def exclusive(path: pathlib.Path, waiting_for: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing); log `waiting_for` when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("another process is %s; waiting for it (%s)", waiting_for, path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
