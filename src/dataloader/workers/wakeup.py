"""When an idle queue worker looks for work without being told: the due time of its next delayed
job, and a bounded fallback poll as a backstop for lost notifications."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from dataloader.maintenance.waiting import wait_event
from dataloader.model.clock import SYSTEM_CLOCK, Clock


class DueTimer:
    """Calls `on_fire(source)` when each delayed job becomes runnable ("timer") and at least
    every `fallback_sec` otherwise ("poll").

    Every due time asked for is kept, not only the earliest: two retries due 15 ms apart both get
    a wake-up. (A claim that finds work does not ask next_due_in.sql again, so a due time the
    timer dropped would wait for the fallback poll.) Times within `COALESCE_SEC` of a fire are
    answered by that fire, and the kept times are bounded (`MAX_DUE_TIMES`, the latest dropped:
    a fire claims and the claim's empty answer asks the database for the next due time anyway).
    """

    # due times this close after a fire are served by it (its claim already sees their jobs, or
    # the next one does at once): one wake-up, not one per millisecond of a burst of retries
    COALESCE_SEC = 0.001
    MAX_DUE_TIMES = 1024

    def __init__(self, fallback_sec: float, on_fire: Callable[[str], None], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._fallback = fallback_sec
        self._clock = clock
        self._due: list[float] = []  # a heap of monotonic due times
        self._changed = asyncio.Event()
        self._on_fire = on_fire

    @property
    def due_at(self) -> float | None:
        """The monotonic time of the next delayed job's wake-up, if one is scheduled."""
        return self._due[0] if self._due else None

    @property
    def due_times(self) -> list[float]:
        """Every wake-up still to come, earliest first."""
        return sorted(self._due)

    def schedule_in(self, seconds: float) -> None:
        """Ask for a wake-up `seconds` from now, besides any already asked for."""
        at = self._clock.monotonic() + max(0.0, seconds)
        earliest = self.due_at
        if len(self._due) >= self.MAX_DUE_TIMES:
            if at >= max(self._due):
                return
            self._due.remove(max(self._due))
            heapq.heapify(self._due)
        heapq.heappush(self._due, at)
        if earliest is None or at < earliest:
            self._changed.set()

    async def run(self) -> None:
        last_fire = self._clock.monotonic()
        while True:
            deadline = last_fire + self._fallback
            source = "poll"
            if self._due and self._due[0] <= deadline:
                deadline, source = self._due[0], "timer"
            self._changed.clear()
            timeout = deadline - self._clock.monotonic()
            if timeout > 0 and await wait_event(self._changed, timeout, clock=self._clock):
                continue  # a new due time came in: recompute
            if source == "timer":
                served = self._clock.monotonic() + self.COALESCE_SEC
                while self._due and self._due[0] <= served:
                    heapq.heappop(self._due)
            last_fire = self._clock.monotonic()
            self._on_fire(source)
