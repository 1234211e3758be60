"""When an idle queue worker looks for work without being told: the due time of its next delayed
job, and a bounded fallback poll as a backstop for lost notifications."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dataloader.maintenance.waiting import wait_event
from dataloader.model.clock import SYSTEM_CLOCK, Clock


class DueTimer:
    """Calls `on_fire(source)` when the next delayed job becomes runnable ("timer") and at least
    every `fallback_sec` otherwise ("poll")."""

    def __init__(self, fallback_sec: float, on_fire: Callable[[str], None], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._fallback = fallback_sec
        self._clock = clock
        self._due_at: float | None = None
        self._changed = asyncio.Event()
        self._on_fire = on_fire

    @property
    def due_at(self) -> float | None:
        """The monotonic time of the next delayed job's wake-up, if one is scheduled."""
        return self._due_at

    def schedule_in(self, seconds: float) -> None:
        """Ask for a wake-up `seconds` from now (kept if an earlier one is already set)."""
        at = self._clock.monotonic() + max(0.0, seconds)
        if self._due_at is None or at < self._due_at:
            self._due_at = at
            self._changed.set()

    async def run(self) -> None:
        last_fire = self._clock.monotonic()
        while True:
            deadline = last_fire + self._fallback
            source = "poll"
            if self._due_at is not None and self._due_at <= deadline:
                deadline, source = self._due_at, "timer"
            self._changed.clear()
            timeout = deadline - self._clock.monotonic()
            if timeout > 0 and await wait_event(self._changed, timeout, clock=self._clock):
                continue  # a new due time came in: recompute
            if source == "timer":
                self._due_at = None
            last_fire = self._clock.monotonic()
            self._on_fire(source)
