"""Which pytest-xdist worker runs which tests: each work unit (a group of tests) runs whole on one worker, in order.

pytest-xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks by appending ``@group`` to the node ids during
collection, which pytest 9.2's structured node ids ignore (pytest-xdist 3.8 then groups nothing, silently). So the
workers write each test's group to a file, and the controller's scheduler (a ``LoadScopeScheduling`` whose scope is
that group) reads it once every worker has collected: collection order is dispatch order (with
``--no-loadscope-reorder``), and a worker gets its next unit when it is almost out of tests.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

#: where the workers write {node id: group} (set by the controller before it starts them)
GROUPS_FILE = "WARMSTART_XDIST_GROUPS"


def is_controller(config: pytest.Config) -> bool:
    """Whether this process is the controller of a ``--dist loadgroup`` run (it starts the workers)."""
    parallel = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    return parallel and config.getoption("dist", None) == "loadgroup"


def controller_setup() -> None:
    """In the controller, before the workers start: the file the workers write the groups to."""
    handle, path = tempfile.mkstemp(prefix="warmstart-xdist-groups-", suffix=".json")
    os.close(handle)
    os.environ[GROUPS_FILE] = path


def controller_cleanup() -> None:
    path = os.environ.pop(GROUPS_FILE, None)
    if path:
        pathlib.Path(path).unlink(missing_ok=True)


def write(config: pytest.Config, groups: dict[str, str]) -> None:
    """In a worker, after ordering the tests: each test's group (every worker collects and writes the same)."""
    path = os.environ.get(GROUPS_FILE)
    if path and hasattr(config, "workerinput"):  # not a pytest that a test starts in a worker
        partial = pathlib.Path(f"{path}.{os.getpid()}")
        partial.write_text(json.dumps(groups))
        partial.replace(path)


class GroupScheduling(LoadScopeScheduling):
    """Load scheduling whose work unit is a test's group as the workers wrote it (a test not in it is its own)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # first called when every worker has collected, so has written the file
            text = pathlib.Path(os.environ[GROUPS_FILE]).read_text()
            self._groups = json.loads(text) if text else {}
        return self._groups.get(nodeid, nodeid)
