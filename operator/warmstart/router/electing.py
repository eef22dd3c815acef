"""Leader election through a `coordination.k8s.io` Lease, for the endpoint picker's readiness gate.

Several picker pods run; one holds the Lease and only that one is ready, so the picker Service, and the gateway
behind it, reaches one picker at a time (the Gateway API Inference Extension's active-passive default: one picker's
load view and speculative picks agree with themselves). The others follow the same EndpointSlices and ConfigMap, so
a standby takes over with a current fleet.

The rules are client-go's leader election, over the Lease's spec:

- a candidate takes the Lease when it is free (no holder) or when its record has not changed for
  `lease_seconds` by the candidate's own clock (no trust in another pod's clock);
- the holder renews every `retry_seconds`; a write carries the resourceVersion it read, so two candidates never
  both win one round;
- the holder counts as leader only while its last successful renewal is younger than `renew_deadline_seconds`
  (shorter than `lease_seconds`), so it stops being ready before anyone else may take over;
- stopping releases the Lease (no holder, duration 1 s), so a rollout hands over within a retry period.

The kubernetes client is blocking: each API call runs in a worker thread (`asyncio.to_thread`) with explicit
timeouts, and the election state is touched on the event loop alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

#: (connect, read) seconds of every Lease request: a hung API server must not outlast a renew deadline
REQUEST_TIMEOUT = (2.0, 3.0)


@dataclass(frozen=True)
class Timing:
    """The election's periods, in seconds (client-go's defaults)."""

    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration")


@dataclass(frozen=True)
class _Record:
    """What a Lease says about its holder, as compared between two reads."""

    holder: str
    transitions: int
    renewed: str


class LeaseElector:
    """Campaign for one Lease and tell, at any moment, whether this process leads (:meth:`is_leader`)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        identity: str,
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs an identity (the pod's name)")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.timing = timing or Timing()
        self._leases = client.CoordinationV1Api(api)
        self._clock = clock
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    def is_leader(self) -> bool:
        """Whether this process holds the Lease and renewed it within the renew deadline (the readiness gate)."""
        return self._renewed_at is not None and self._clock() - self._renewed_at < self.timing.renew_deadline_seconds

    async def start(self) -> None:
        """Campaign in the background until :meth:`stop`."""
        self._task = asyncio.get_running_loop().create_task(self._campaign(), name="lease-elector")

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; with `release`, give the Lease up if held, so another candidate takes it at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if release and self._renewed_at is not None:
            self._renewed_at = None
            try:
                await asyncio.to_thread(self._release)
            except Exception as error:  # noqa: BLE001 - the Lease then expires on its own
                log.warning("releasing Lease %s failed (%s); it expires by itself", self.name, error)

    async def _campaign(self) -> None:
        while True:
            try:
                leading = await asyncio.to_thread(self._try_acquire_or_renew)
            except ApiException as error:  # one failed round is retried; leadership lapses by its deadline
                log.warning("Lease %s/%s: %s %s", self.namespace, self.name, error.status, error.reason)
                leading = False
            except Exception as error:  # noqa: BLE001 - the same for a connection error
                log.warning("Lease %s/%s: %s", self.namespace, self.name, type(error).__name__)
                leading = False
            if leading:
                if self._renewed_at is None:
                    log.info("leading: %s holds Lease %s/%s", self.identity, self.namespace, self.name)
                self._renewed_at = self._clock()
            elif self._renewed_at is not None and not self.is_leader():
                log.warning("lost Lease %s/%s: not renewed within the deadline", self.namespace, self.name)
                self._renewed_at = None
            await asyncio.sleep(self.timing.retry_seconds)

    def _try_acquire_or_renew(self) -> bool:
        """One round, in a worker thread: True when this process holds the Lease after it."""
        try:
            lease = self._leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                raise
            return self._create()
        spec = lease.spec or client.V1LeaseSpec()
        record = _Record(spec.holder_identity or "", int(spec.lease_transitions or 0), str(spec.renew_time or ""))
        now = self._clock()
        if record != self._observed:  # the holder wrote since the last look: its lease duration starts again
            self._observed, self._observed_at = record, now
        mine = record.holder == self.identity
        if record.holder and not mine and now - self._observed_at < self.timing.lease_seconds:
            return False  # another holder, heard from within the lease duration
        stamp = dt.datetime.now(dt.UTC)
        lease.spec = client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.timing.lease_seconds)),
            acquire_time=spec.acquire_time if mine and spec.acquire_time else stamp,
            renew_time=stamp,
            lease_transitions=record.transitions + (0 if mine else 1),
        )
        return self._write(lambda: self._replace(lease))

    def _replace(self, lease: client.V1Lease) -> None:
        """An update (PUT) carrying the resourceVersion read: 409 when the Lease changed since."""
        self._leases.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=REQUEST_TIMEOUT)

    def _create(self) -> bool:
        """Outside the operator (which creates the Lease), the first candidate creates it."""
        stamp = dt.datetime.now(dt.UTC)
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=max(1, round(self.timing.lease_seconds)),
                acquire_time=stamp,
                renew_time=stamp,
                lease_transitions=0,
            ),
        )
        return self._write(
            lambda: self._leases.create_namespaced_lease(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
        )

    def _write(self, call: Callable[[], Any]) -> bool:
        """A conditional write; a conflict (someone else wrote first) loses this round."""
        try:
            call()
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def _release(self) -> None:
        lease = self._leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        if lease.spec is None or lease.spec.holder_identity != self.identity:
            return
        stamp = dt.datetime.now(dt.UTC)
        transitions = lease.spec.lease_transitions
        lease.spec = client.V1LeaseSpec(
            lease_duration_seconds=1, acquire_time=stamp, renew_time=stamp, lease_transitions=transitions
        )
        if self._write(lambda: self._replace(lease)):
            log.info("released Lease %s/%s", self.namespace, self.name)
