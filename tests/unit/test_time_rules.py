"""The engine's time-based rules, driven by a `ManualClock` instead of real time: when the
DueTimer wakes an idle queue worker (a delayed job's due time, else the fallback poll), when the
next heartbeat is due, and how long the reconnect backoff waits. Every test synchronises on the
code under test (`ManualClock.parked`), never on a sleep."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from dataloader.maintenance.waiting import Backoff, wait_event
from dataloader.model.clock import ManualClock
from dataloader.workers.heartbeat import HeartbeatSchedule, heartbeat_period
from dataloader.workers.lease_guard import MAX_FENCE_MARGIN_SEC, fence_at, fence_margin, overdue
from dataloader.workers.wakeup import DueTimer

# A bound for each wait on the code under test, so a broken rule fails fast instead of hanging.
STEP_TIMEOUT = 5.0


@asynccontextmanager
async def running(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task[Any]]:
    task = asyncio.ensure_future(coro)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Fired:
    """The timer's `on_fire`: records each source and lets a test await the next one."""

    def __init__(self) -> None:
        self.sources: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, source: str) -> None:
        self.sources.append(source)
        self._changed.set()

    async def next_after(self, count: int) -> str:
        async with asyncio.timeout(STEP_TIMEOUT):
            while len(self.sources) <= count:
                self._changed.clear()
                await self._changed.wait()
        return self.sources[count]


async def parked_at(clock: ManualClock, *deadlines: float) -> None:
    """Wait until the parked tasks wait for exactly these deadlines."""
    async with asyncio.timeout(STEP_TIMEOUT):
        await clock.until(lambda: clock.deadlines() == list(deadlines))


async def fire(clock: ManualClock, fired: Fired, seconds: float, then_parked_at: float) -> str:
    """Advance the clock; the source the timer fired, once it waits for its next deadline."""
    before = len(fired.sources)
    clock.advance(seconds)
    source = await fired.next_after(before)
    await parked_at(clock, then_parked_at)
    assert len(fired.sources) == before + 1, fired.sources
    return source


async def test_idle_timer_polls_every_fallback_period_and_not_before() -> None:
    clock = ManualClock()
    fired = Fired()
    timer = DueTimer(30.0, fired, clock=clock)
    async with running(timer.run()):
        await parked_at(clock, 1030.0)
        clock.advance(29.9)
        await parked_at(clock, 1030.0)  # still waiting for the same deadline
        assert fired.sources == []
        assert await fire(clock, fired, 0.1, then_parked_at=1060.0) == "poll"
        assert await fire(clock, fired, 30.0, then_parked_at=1090.0) == "poll"


async def test_a_delayed_job_wakes_the_worker_at_its_due_time() -> None:
    clock = ManualClock()
    fired = Fired()
    timer = DueTimer(30.0, fired, clock=clock)
    async with running(timer.run()):
        await parked_at(clock, 1030.0)
        timer.schedule_in(5.0)
        await parked_at(clock, 1005.0)
        timer.schedule_in(8.0)  # a later due time does not push the earlier one back
        assert timer.due_at == 1005.0
        await parked_at(clock, 1005.0)
        assert await fire(clock, fired, 5.0, then_parked_at=1008.0) == "timer"
        # ... and is kept: the fire at 1005 does not drop it (two retries due 3 s apart both wake
        # the worker; a claim that finds work asks the database for no further due time)
        assert timer.due_at == 1008.0
        # After a fire the fallback poll counts from that fire.
        assert await fire(clock, fired, 3.0, then_parked_at=1038.0) == "timer"
        assert timer.due_at is None


async def test_due_times_a_fire_has_reached_are_served_by_it_and_the_later_ones_kept() -> None:
    clock = ManualClock()
    fired = Fired()
    timer = DueTimer(30.0, fired, clock=clock)
    async with running(timer.run()):
        await parked_at(clock, 1030.0)
        for seconds in (2.0, 1.0, 1.0005, 3.0, 1.0):
            timer.schedule_in(seconds)
        assert timer.due_times == [1001.0, 1001.0, 1001.0005, 1002.0, 1003.0]
        # one fire for the three due within a millisecond of each other
        assert await fire(clock, fired, 1.0, then_parked_at=1002.0) == "timer"
        assert await fire(clock, fired, 1.0, then_parked_at=1003.0) == "timer"
        assert await fire(clock, fired, 1.0, then_parked_at=1033.0) == "timer"
        assert fired.sources == ["timer"] * 3


def test_the_kept_due_times_are_bounded_by_dropping_the_latest() -> None:
    clock = ManualClock()
    timer = DueTimer(30.0, lambda source: None, clock=clock)
    for i in range(DueTimer.MAX_DUE_TIMES):
        timer.schedule_in(10.0 + i)
    timer.schedule_in(5000.0)  # later than every kept one: dropped
    timer.schedule_in(1.0)  # earlier: kept, the latest dropped
    due = timer.due_times
    assert len(due) == DueTimer.MAX_DUE_TIMES
    assert due[0] == 1001.0 and due[-1] == 1000.0 + 10.0 + DueTimer.MAX_DUE_TIMES - 2


async def test_a_due_time_beyond_the_fallback_poll_waits_for_the_poll_first() -> None:
    clock = ManualClock()
    fired = Fired()
    timer = DueTimer(30.0, fired, clock=clock)
    async with running(timer.run()):
        await parked_at(clock, 1030.0)
        timer.schedule_in(45.0)
        assert await fire(clock, fired, 30.0, then_parked_at=1045.0) == "poll"
        assert await fire(clock, fired, 15.0, then_parked_at=1075.0) == "timer"


async def test_a_negative_delay_fires_at_once() -> None:
    clock = ManualClock()
    fired = Fired()
    timer = DueTimer(30.0, fired, clock=clock)
    async with running(timer.run()):
        await parked_at(clock, 1030.0)
        timer.schedule_in(-3.0)
        assert await fired.next_after(0) == "timer"
        await parked_at(clock, 1030.0)
        assert clock.monotonic() == 1000.0 and fired.sources == ["timer"]


def test_heartbeat_period_is_the_setting_or_a_third_of_the_shortest_lease() -> None:
    assert heartbeat_period(10.0, []) == 10.0
    assert heartbeat_period(10.0, [300, 60]) == 10.0
    assert heartbeat_period(10.0, [300, 12]) == 4.0
    assert heartbeat_period(5000.0, []) == 1200.0  # no lease: an hour's third bounds it


def test_heartbeat_schedule_follows_the_running_attempts() -> None:
    clock = ManualClock()
    beats = HeartbeatSchedule(10.0, clock)
    assert (beats.due(), beats.until_due()) == (False, None)  # nothing runs: nothing due, no deadline

    beats.started([60])
    assert beats.until_due() == 10.0
    clock.advance(4.0)
    beats.started([9])  # a second attempt does not move the first heartbeat
    assert beats.until_due() == 6.0
    assert not beats.due()
    clock.advance(6.0)
    assert beats.due() and beats.until_due() == 0.0
    clock.advance(2.0)
    assert beats.until_due() == 0.0  # overdue is "now", never negative

    beats.beaten([60, 9])  # the next period honours the shorter lease: 9 / 3
    assert beats.until_due() == 3.0
    clock.advance(3.0)
    assert beats.due()

    beats.idle()
    assert (beats.due(), beats.until_due()) == (False, None)
    beats.started([60])
    assert beats.until_due() == 10.0


async def test_backoff_doubles_to_its_cap_and_resets_after_a_success() -> None:
    clock = ManualClock()
    backoff = Backoff(0.1, 0.5, clock=clock)
    waits = []
    for _ in range(5):
        pause = asyncio.ensure_future(backoff.pause())
        async with asyncio.timeout(STEP_TIMEOUT):
            (deadline,) = await clock.parked()
        waits.append(round(deadline - clock.monotonic(), 6))
        clock.advance(deadline - clock.monotonic())
        assert await pause is False
    assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff.failing
    assert backoff.succeeded() is True
    assert (backoff.failing, backoff.succeeded()) == (False, False)


async def test_backoff_pause_ends_early_when_interrupted() -> None:
    clock = ManualClock()
    backoff = Backoff(clock=clock)
    stop = asyncio.Event()
    pause = asyncio.ensure_future(backoff.pause(stop))
    async with asyncio.timeout(STEP_TIMEOUT):
        await clock.parked()
    stop.set()
    assert await pause is True
    assert clock.monotonic() == 1000.0


async def test_wait_event_returns_whether_the_event_or_the_deadline_came_first() -> None:
    clock = ManualClock()
    event = asyncio.Event()
    waiting = asyncio.ensure_future(wait_event(event, 2.0, clock=clock))
    await parked_at(clock, 1002.0)
    clock.advance(2.0)
    assert await waiting is False
    waiting = asyncio.ensure_future(wait_event(event, None, clock=clock))
    await parked_at(clock, float("inf"))
    event.set()
    assert await waiting is True
    assert await wait_event(event, 0.0, clock=clock) is True  # already set: no wait at all


async def test_a_cancel_that_arrives_as_the_event_is_set_is_not_lost():
    """Python 3.11's wait_for drops a cancel that lands in the same loop turn as the event: the
    waiting loop (a worker's DueTimer) then ran on and held up the worker's stop for the whole
    shutdown timeout."""
    import asyncio

    from dataloader.model.clock import SYSTEM_CLOCK

    for _ in range(20):
        event = asyncio.Event()
        waiter = asyncio.create_task(SYSTEM_CLOCK.wait(event, 10))
        await asyncio.sleep(0)  # the waiter is parked on the event
        event.set()
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            continue
        raise AssertionError("the cancel was swallowed: wait() returned instead")


def test_an_attempt_is_fenced_a_fifth_of_its_lease_before_it_can_run_out_at_most_two_seconds() -> None:
    assert fence_margin(5) == 1.0
    assert fence_margin(60) == MAX_FENCE_MARGIN_SEC == 2.0
    assert fence_margin(1) == 0.2
    assert fence_at(100.0, 5) == 104.0
    assert fence_at(100.0, 60) == 158.0
    # one heartbeat missed (heartbeat_period: at most a third of the lease) never fences an attempt
    for ttl in (1, 3, 5, 60, 3600):
        assert fence_at(0.0, ttl) > 2 * heartbeat_period(10.0, [ttl])


def test_only_attempts_past_their_fence_time_are_overdue() -> None:
    class Running:
        def __init__(self, fence_at: float) -> None:
            self.fence_at = fence_at

    early, late, fenced = Running(10.0), Running(20.0), Running(math.inf)
    assert overdue([early, late, fenced], 9.99) == []
    assert overdue([early, late, fenced], 10.0) == [early]
    assert overdue([early, late, fenced], 1e9) == [early, late]  # a fenced one is never asked again
