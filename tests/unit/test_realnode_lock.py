"""The host's real-node lock (tests/realnodelock.py): taken once, never waited for when a parent process holds it."""

from __future__ import annotations

import fcntl
import pathlib
import subprocess
import sys
import time

import pytest

import realnodelock

TESTS = pathlib.Path(__file__).resolve().parents[1]
PROBE = "import pathlib, sys, realnodelock; print(realnodelock.held_by_an_ancestor(pathlib.Path(sys.argv[1])))"


def _probe_under_flock(lock: pathlib.Path) -> str:
    """What a grandchild of ``flock LOCK`` (with no inherited descriptor of it) says about the lock."""
    inner = [sys.executable, "-c", PROBE, str(lock)]
    outer = [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:], check=True)", *inner]
    done = subprocess.run(
        ["flock", str(lock), *outer], cwd=TESTS, env={"PYTHONPATH": str(TESTS)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_lock_held_by_an_ancestor_is_seen_and_one_held_by_nobody_is_not(tmp_path: pathlib.Path) -> None:
    lock = tmp_path / "realnode.lock"
    lock.touch()
    assert _probe_under_flock(lock) == "True"
    assert realnodelock.held_by_an_ancestor(lock) is False
    assert realnodelock.held_by_an_ancestor(tmp_path / "missing.lock") is False


def test_a_lock_held_by_another_process_tree_is_not_an_ancestors(tmp_path: pathlib.Path) -> None:
    lock = tmp_path / "realnode.lock"
    lock.touch()
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    try:
        with lock.open() as handle:  # wait until the holder has it
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(handle, fcntl.LOCK_UN)
                except BlockingIOError:
                    break
                time.sleep(0.05)
        assert realnodelock.held_by_an_ancestor(lock) is False
    finally:
        holder.kill()
        holder.wait()


def test_taking_the_lock_holds_it_until_release_and_twice_is_once(tmp_path: pathlib.Path) -> None:
    lock = tmp_path / "realnode.lock"
    taken = realnodelock.RealNodeLock(lock)
    taken.take()
    taken.take()
    with lock.open() as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken.release()
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
