"""The takeover scenario's "no duplicate Jobs" check: it sees a node preloaded twice and more Jobs than nodes."""

from __future__ import annotations

from kubernetes import client

from chaos_peering import duplicate_jobs, read_live
from warmstart.render import jobs


def _job(name: str, attempt: int) -> client.V1Job:
    return client.V1Job(metadata=client.V1ObjectMeta(name=name, labels={jobs.ATTEMPT_LABEL: str(attempt)}))


def test_one_first_attempt_per_node_passes() -> None:
    assert duplicate_jobs([_job("a-1", 1), _job("b-1", 1)], nodes=2) == []


def test_a_second_attempt_and_more_jobs_than_nodes_are_both_reported() -> None:
    found = duplicate_jobs([_job("a-1", 1), _job("b-1", 1), _job("a-2", 2)], nodes=2)
    assert found == [
        "3 preload Jobs for 2 nodes",
        "1 Jobs past the first attempt (a node preloaded again), e.g. ['a-2']",
    ]


def test_the_live_reads_are_counted_from_the_operators_log_line() -> None:
    log = (
        "[INFO] cache ns/weights-x: 125 nodes Ready in status"
        " without the label in the watch's view; read them: 120 labelled\n"
        "... cache ns/weights-x: 5 nodes Ready in status without the label in the watch's view; read them: 0 labelled\n"
    )
    assert read_live(log) == (130, 120)
    assert read_live("") == (0, 0)
