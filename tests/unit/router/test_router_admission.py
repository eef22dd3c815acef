"""The overflow queue: FIFO under a fleet-wide count of free slots, bounded, and cancellation-safe."""

from __future__ import annotations

import asyncio

import pytest

from warmstart.router.admission import Admission, QueueFull


class Slots:
    """A fleet of ``total`` slots; ``take``/``give`` model requests starting and finishing."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0

    def free(self) -> int:
        return self.total - self.used


async def test_no_cap_admits_everything_at_once() -> None:
    admission = Admission(lambda: None)
    for _ in range(100):
        await admission.admit(0)
    assert admission.depth == 0


async def test_full_fleet_queues_in_order_and_overflows_beyond_the_queue() -> None:
    slots = Slots(1)
    admission = Admission(slots.free)
    await admission.admit(2)
    slots.used = 1
    order: list[int] = []

    async def request(n: int) -> None:
        await admission.admit(2)
        slots.used += 1
        order.append(n)

    waiting = [asyncio.create_task(request(n)) for n in range(2)]
    await asyncio.sleep(0)
    assert admission.depth == 2
    with pytest.raises(QueueFull):
        await admission.admit(2)
    for _ in range(2):
        slots.used -= 1  # a request finishes
        admission.wake()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*waiting)
    assert order == [0, 1]


async def test_a_newcomer_does_not_take_a_slot_granted_to_the_queue() -> None:
    slots = Slots(1)
    slots.used = 1
    admission = Admission(slots.free)

    async def request() -> None:
        await admission.admit(4)
        slots.used += 1  # routed before the next await, as the proxy does

    queued = asyncio.create_task(request())
    await asyncio.sleep(0)
    slots.used = 0
    admission.wake()  # granted to the queued request, which has not run yet
    newcomer = admission.admit(4)
    newcomer.send(None)  # runs to its first suspension now, before the queued request resumes
    assert admission.depth == 1  # it queued behind the grant instead of taking the slot
    await asyncio.wait_for(queued, timeout=5)
    assert slots.used == 1
    newcomer.close()


async def test_a_request_cancelled_while_queued_leaves_the_queue() -> None:
    slots = Slots(1)
    slots.used = 1
    admission = Admission(slots.free)
    first = asyncio.create_task(admission.admit(4))
    second = asyncio.create_task(admission.admit(4))
    await asyncio.sleep(0)
    assert admission.depth == 2
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert admission.depth == 1
    slots.used = 0
    admission.wake()
    await second  # the one left gets the slot


async def test_a_grant_cancelled_before_use_passes_to_the_next() -> None:
    slots = Slots(1)
    slots.used = 1
    admission = Admission(slots.free)
    first = asyncio.create_task(admission.admit(4))
    second = asyncio.create_task(admission.admit(4))
    await asyncio.sleep(0)
    slots.used = 0
    admission.wake()  # granted to first ...
    first.cancel()  # ... which is cancelled before it resumes
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, timeout=5)
    assert admission.depth == 0
