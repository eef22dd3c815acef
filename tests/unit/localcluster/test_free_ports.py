"""Ports for the local cluster's servers: below the kernel's ephemeral range, distinct, and free when chosen.

A port from the ephemeral range can become an outgoing connection's source port between the choice and the server's
bind (it failed CI once: kube-scheduler "bind: address already in use" on 56667).
"""

from __future__ import annotations

import pathlib
import random
import socket

import pytest

from warmstart.localcluster import processes


def test_ports_are_chosen_below_the_ephemeral_range_and_are_distinct() -> None:
    chosen = processes.free_ports(f"p{i}" for i in range(40))
    assert len(set(chosen.values())) == 40
    low = int(processes.EPHEMERAL_RANGE.read_text().split()[0])
    assert all(processes.LOWEST_PORT <= port < low for port in chosen.values()), chosen


def test_a_port_something_listens_on_or_already_taken_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        spare = processes.free_port()
        offered = iter([busy, 12345, spare])  # listened on, already taken by this cluster, free
        monkeypatch.setattr(random, "randrange", lambda _low, _high: next(offered))
        assert processes.free_port(taken={12345}, ephemeral_low=busy + 1) == spare


def test_without_room_below_the_range_the_kernel_picks(tmp_path: pathlib.Path) -> None:
    narrow = tmp_path / "range"
    narrow.write_text("1024\t65000\n")
    assert processes._ephemeral_low(narrow) == 1024
    assert processes.free_port(ephemeral_low=1024) >= 1024
    assert processes._ephemeral_low(tmp_path / "missing") == 0
