"""Bounded concurrency for the per-node writes of a reconcile (preload Jobs, their signatures, node labels).

A reconcile that creates a wave of 125 Jobs makes 250 requests; one after the other, each waits for the API server's
round trip. They go out through one pool of `WRITE_CONCURRENCY` threads shared by the whole process, so however many
caches reconcile at once, the operator never has more than that many of these writes in flight. Each step runs in a
copy of the caller's context, so kopf's per-handler context (its Events, its logger) still applies.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

#: writes in flight at once, across every reconcile of this process
WRITE_CONCURRENCY = 8

Item = TypeVar("Item")
Result = TypeVar("Result")

_pool = ThreadPoolExecutor(max_workers=WRITE_CONCURRENCY, thread_name_prefix="warmstart-write")


def each(items: Sequence[Item], step: Callable[[Item], Result]) -> list[Result]:
    """`step(item)` for every item, at most WRITE_CONCURRENCY at once; the results in the items' order.

    Every step runs to its end; then the first exception a step raised (in the items' order) is raised."""
    if len(items) <= 1:
        return [step(item) for item in items]
    futures = [_pool.submit(contextvars.copy_context().run, step, item) for item in items]
    concurrent.futures.wait(futures)
    return [future.result() for future in futures]
