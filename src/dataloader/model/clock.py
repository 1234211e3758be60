"""Time as a dependency: the engine's time-based rules (when a heartbeat is due, when a delayed
job's timer fires, how long a backoff pause lasts) ask a `Clock` instead of the `time` module, so a
unit test can drive them with `ManualClock` and check each decision without sleeping.

`SYSTEM_CLOCK` is the default everywhere; nothing in production needs to pass a clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


def iso(value: dt.datetime) -> str:
    """The one text form of a time in every face (CLI output, HTTP bodies, every `to_dict`): ISO
    8601 in UTC with `Z`, as pydantic writes the HTTP API's times. A naive time is written as it is."""
    if value.tzinfo is None:
        return value.isoformat()
    try:
        value = value.astimezone(dt.UTC)
    except OverflowError:  # a clamped extreme (storage/db.py) in another zone: leave it as it is
        return value.isoformat()
    return value.replace(tzinfo=None).isoformat() + "Z"


def iso_times(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a row's `asdict`, for a `to_dict`) with each of its times written by `iso`."""
    return {key: iso(value) if isinstance(value, dt.datetime) else value for key, value in data.items()}


def refuse_number_as_time(value: object) -> object:
    """A pydantic before-validator for a time given to dataloader: a number (or a text that is one)
    is refused. pydantic would read it as Unix seconds, so `1.8e-294` silently became 1970-01-01
    and a bulk operation meant for a range acted on every job; a time is written as a time
    (RFC 3339 with a zone, or a `datetime`)."""
    number = isinstance(value, (int, float))  # bool is an int too: refused as well
    if isinstance(value, str):
        try:
            float(value)
            number = True
        except ValueError:
            number = False
    if number:
        raise ValueError("must be a time (RFC 3339 with a timezone, e.g. 2030-01-01T12:00:00Z), not a number")
    return value


class Clock(Protocol):
    """Monotonic time for deadlines, wall time for humans and rows, and the two ways to pass time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (the event loop's clock for the real one)."""
        ...

    def wall(self) -> dt.datetime:
        """The current UTC time."""
        ...

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Let `seconds` pass, or less if `wake` is set meanwhile (True then)."""
        ...

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Wait until `event` is set (True) or `timeout` seconds passed (False); None: no deadline."""
        ...


class SystemClock:
    """The real clock: `time.monotonic` (what asyncio's loop uses) and asyncio's own timers."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        if wake is not None:
            return await self.wait(wake, seconds)
        await asyncio.sleep(seconds)
        return False

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if timeout is None:
            await event.wait()
            return True
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancel that arrives as the
        # event is set (the caller's loop then runs on, e.g. a DueTimer that ignores its stop).
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return event.is_set()
        return True


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock that moves only when told (`advance`), for tests. A task in `wait`/`sleep` is
    parked until its event is set or the clock is advanced past its deadline; `deadlines()` shows
    what the parked tasks wait for and `parked()` lets a test wait until a task has parked, so a
    test synchronises on the code under test, never on real time."""

    def __init__(self, start: float = 1_000.0,
                 wall_start: dt.datetime = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)) -> None:
        self._start = start
        self._now = start
        self._wall_start = wall_start
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._parked_changed = asyncio.Event()

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> dt.datetime:
        return self._wall_start + dt.timedelta(seconds=self._now - self._start)

    async def sleep(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        return await self.wait(wake if wake is not None else asyncio.Event(), seconds)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        if timeout is not None and timeout <= 0:
            return False
        due: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._now + timeout if timeout is not None else float("inf"), next(self._seq), due)
        heapq.heappush(self._timers, entry)
        self._parked_changed.set()
        setter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait([setter, due], return_when=asyncio.FIRST_COMPLETED)
        finally:
            setter.cancel()
            if entry in self._timers:
                self._timers.remove(entry)
                heapq.heapify(self._timers)
            self._parked_changed.set()
        return event.is_set()

    def deadlines(self) -> list[float]:
        """The deadlines (monotonic seconds) of the tasks parked now, earliest first."""
        return sorted(at for at, _, fut in self._timers if not fut.done())

    async def parked(self, count: int = 1) -> list[float]:
        """Wait (on the event loop, not on time) until at least `count` tasks are parked; their deadlines."""
        await self.until(lambda: len(self.deadlines()) >= count)
        return self.deadlines()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until `condition()` holds, re-checking whenever a task parks or unparks."""
        while not condition():
            self._parked_changed.clear()
            await self._parked_changed.wait()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every task whose deadline has come."""
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        self._now += seconds
        for at, _, fut in list(self._timers):
            if at <= self._now and not fut.done():
                fut.set_result(None)
