"""A picked request's hold on its replica: in-flight slot, served count and prefill claim, released exactly once.

The endpoint picker takes the slot on the first endpoint of its pick list when it answers the
gateway, exactly as the proxy does before it connects. The gateway may serve the request from a
fallback (the first endpoint refused the connection): when the response reports the endpoint
that served it, the slot, the served count and the policy's placement move there. The slot is
released once, at the response's end or when the stream ends in any other way (a cancelled or
broken stream included), so in-flight counts stay exact.
"""

from __future__ import annotations

import logging
import time

from warmstart.router.prefixes import PromptKey
from warmstart.router.relaying import PrefillClaim
from warmstart.router.replicas import Replica
from warmstart.router.routing import Router

log = logging.getLogger(__name__)


class Assignment:
    """One request's slot on the replica that serves it."""

    def __init__(self, router: Router, replica: Replica, key: PromptKey, uncached_chars: int, started: float) -> None:
        self.router, self.replica, self.key, self.started = router, replica, key, started
        self.strategy = router.policy.strategy.value
        self._first = True
        self._given_back = False
        self._released = False
        self.claim = PrefillClaim(replica, uncached_chars)
        self._take(replica)

    def _take(self, replica: Replica) -> None:
        router = self.router
        router.policy.placed(replica.url, self.key)
        router.metrics.placement(router.placement(replica)).inc()
        replica.inflight += 1
        replica.served += 1
        router.metrics.inflight_of(replica.url).set(replica.inflight)

    def _give(self, replica: Replica) -> None:
        replica.inflight -= 1
        if self.router.fleet.get(replica.url) is replica:
            self.router.metrics.inflight_of(replica.url).set(replica.inflight)
        self.router.admission.wake()

    def served_by(self, url: str) -> None:
        """The gateway reports ``url`` served the request: move the slot there if it is another replica."""
        if self._given_back or url == self.replica.url:
            return
        replica = self.router.fleet.get(url)
        if replica is None:
            log.info("served endpoint is not a known replica; the request stays counted on the picked one")
            return
        old = self.replica
        self.claim.release()  # the fallback's prefill is not estimated: its first byte ends it soon
        self._give(old)
        old.served -= 1
        self.replica = replica
        self._take(replica)

    def first_byte(self) -> None:
        """The first byte of the reply: the prefill is over; the time to it is the replica's TTFT."""
        if self._first:
            self._first = False
            self.claim.release()
            self.router.metrics.ttft_of(self.replica.url).observe(time.perf_counter() - self.started)

    def give_back(self) -> None:
        """Give the slot back now (once); the outcome is counted by :meth:`release` when it is known."""
        if self._given_back:
            return
        self._given_back = True
        self.claim.release()
        self._give(self.replica)

    def release(self, outcome: str) -> None:
        """Give the slot back and count the request's outcome (``ok``, ``error``, ``aborted``); once."""
        if self._released:
            return
        self._released = True
        self.give_back()
        self.router.metrics.request(self.strategy, self.replica.url, outcome).inc()
