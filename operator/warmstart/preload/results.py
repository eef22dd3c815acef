"""How a preload ends: the error that carries a Reason, and writing the Result as the termination message.

The reasons, exit codes and message format are the operator's contract too, so they live in
`warmstart.api.preloading`; this module is the preloader's side of it (the only I/O: the termination log).
"""

from __future__ import annotations

import os

from warmstart.api.preloading import Reason, Result


class PreloadError(Exception):
    """A failure with a reason: raised anywhere in the preload, turned into a Result at the top."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def write_termination_log(path: str | None, result: Result) -> bool:
    """Write the result to `path` if its directory exists (it does in a pod); True if written."""
    if not path or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return False
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(result.to_json())
    except OSError:
        return False
    return True
