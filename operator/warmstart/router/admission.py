"""The overflow queue: admit a request when some replica is under the concurrency cap, else queue it (FIFO, bounded).

Free slots are counted over the fleet (``cap - in-flight`` per replica). A request goes straight
through only when nobody is queued and a slot is free; otherwise it waits its turn. When a slot
frees (a request finishes, a replica joins, the cap changes), the head of the queue is granted
it; a granted slot is set aside until that request has been routed, so a newcomer cannot take
it first. A request cancelled while queued leaves the queue, and a grant it had not used yet
passes to the next in line. Everything runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class QueueFull(Exception):
    """The cap is reached and the queue holds ``max_queue`` requests already."""


class Admission:
    """FIFO admission against a fleet-wide count of free slots."""

    def __init__(self, free_slots: Callable[[], int | None]) -> None:
        self._free_slots = free_slots
        """Free slots in the fleet now; None = no cap (everything is admitted at once)."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._granted = 0
        """Slots granted to queued requests that have not been routed yet."""
        self.freed: Callable[[], None] | None = None
        """Told whenever a slot may have freed (router replicas sharing their in-flight counts)."""

    @property
    def depth(self) -> int:
        """Requests waiting in the queue."""
        return len(self._waiters)

    def _room(self) -> bool:
        free = self._free_slots()
        return free is None or free - self._granted > 0

    async def admit(self, max_queue: int) -> None:
        """Return when this request may be routed; :class:`QueueFull` if it may not even wait.

        The caller must route (take its slot) before its next ``await``.
        """
        if not self._waiters and self._room():
            return
        if len(self._waiters) >= max_queue:
            raise QueueFull
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._granted -= 1  # granted but never used: pass the slot on
                self.wake()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        self._granted -= 1

    def wake(self) -> None:
        """Grant free slots to the head of the queue (call whenever a slot may have freed)."""
        if self.freed is not None:
            self.freed()
        while self._waiters and self._room():
            waiter = self._waiters.popleft()
            if waiter.done():  # cancelled, and its task has not run its handler yet
                continue
            self._granted += 1
            waiter.set_result(None)
