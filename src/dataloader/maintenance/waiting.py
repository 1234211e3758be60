"""How the engine's loops wait: for an event or a deadline, whichever comes first, and between
reconnect attempts with a growing delay. One copy each, used by the queue worker, the listener, the
wake-up timer and the periodic duties, so "no busy polling" and "a database restart is weather"
are decided in one place.
"""

from __future__ import annotations

import asyncio

from dataloader.model.clock import SYSTEM_CLOCK, Clock


async def wait_event(event: asyncio.Event, timeout: float | None, *, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Wait until `event` is set (True) or `timeout` seconds have passed (False). The event is not
    cleared; None waits without a deadline."""
    return await clock.wait(event, timeout)


class Backoff:
    """The pause between attempts to reach the database: `first` seconds, doubled after every
    failure up to `cap`, back to `first` after a success. `failing` tells the first failure of a
    streak (log it as a warning) from the repeats; `succeeded()` tells when a streak ended (log the
    recovery)."""

    def __init__(self, first: float = 0.1, cap: float = 5.0, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if first <= 0 or cap < first:
            raise ValueError(f"backoff needs 0 < first <= cap, got first={first}, cap={cap}")
        self.first = first
        self.cap = cap
        self.delay = first
        self._clock = clock

    @property
    def failing(self) -> bool:
        """True once a failure was recorded since the last success."""
        return self.delay > self.first

    async def pause(self, interrupt: asyncio.Event | None = None) -> bool:
        """Record a failure and wait the current delay, or less if `interrupt` is set meanwhile
        (True then). The next pause is twice as long, up to `cap`."""
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return await self._clock.sleep(delay, interrupt)

    def succeeded(self) -> bool:
        """Record a success; True if it ended a streak of failures."""
        recovered = self.failing
        self.delay = self.first
        return recovered
