"""The fleet bench's idle minute: every node Ready, nothing to do; the operator's CPU next to the node events it got.

Over `IDLE_SECONDS`:
  - the operator's CPU seconds, in 10-s slices (a steady cost, or the tail of the start-up's work);
  - the node watch events the API server sent in that minute, counted by a watch of the bench's own (one line per
    event; bookmarks apart): what any node watcher of the operator receives;
  - the node events the operator's informer received, by what they changed of what the controllers read
    (`warmstart_node_events_total{outcome}`: changed, unchanged, bookmark).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psutil
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from scale_fixtures import delta, scrape

#: how long the operator's CPU is read with every node Ready and nothing else to do
IDLE_SECONDS = 60.0


@dataclass
class IdleFigures:
    cpu_s_per_min: float
    #: CPU seconds per 10-s slice
    cpu_slices_s: list[float]
    #: watch events on nodes that the API server sent in the minute, by type (ADDED, MODIFIED, DELETED, BOOKMARK)
    node_events: dict[str, int] = field(default_factory=dict)
    #: the operator informer's node events in the minute, by outcome
    operator_node_events: dict[str, float] = field(default_factory=dict)


class NodeEventCounter:
    """Counts the node watch events the API server sends from now on, in a thread, until `stop`."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self.counts: Counter[str] = Counter()
        self._response: Any = None
        self._stopped = threading.Event()
        listed = client.CoreV1Api(api).list_node(limit=1)
        self._since = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            response = self._api.call_api(
                "/api/v1/nodes",
                "GET",
                query_params=[
                    ("watch", "true"),
                    ("allowWatchBookmarks", "true"),
                    ("resourceVersion", self._since),
                    ("timeoutSeconds", int(IDLE_SECONDS) + 30),
                ],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            self._response = response
            try:
                for line in iter_resp_lines(response):
                    if self._stopped.is_set():
                        return
                    kind = line[9:20].split('"', 1)[0] if line.startswith('{"type":"') else "?"
                    self.counts[kind] += 1
            except (HTTPError, OSError):  # shut by stop()
                return

    def stop(self) -> dict[str, int]:
        self._stopped.set()
        if self._response is not None:
            try:
                self._response.shutdown()
            except (HTTPError, OSError):  # already closed
                pass
        self._thread.join(5)
        return dict(self.counts)


def measure(api: client.ApiClient, operator: psutil.Process, metrics_port: int) -> IdleFigures:
    """The idle minute, as the module docstring says."""
    outcomes = ("outcome",)
    informer_before = scrape(metrics_port, "warmstart_node_events_total", outcomes)
    counter = NodeEventCounter(api)
    before = sum(operator.cpu_times()[:2])
    slices = []
    for _ in range(int(IDLE_SECONDS // 10)):
        slice_start = sum(operator.cpu_times()[:2])
        time.sleep(10)
        slices.append(round(sum(operator.cpu_times()[:2]) - slice_start, 2))
    spent = sum(operator.cpu_times()[:2]) - before
    events = counter.stop()
    informer = delta(scrape(metrics_port, "warmstart_node_events_total", outcomes), informer_before)
    return IdleFigures(round(spent * 60 / IDLE_SECONDS, 2), slices, events, informer)
