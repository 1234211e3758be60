"""How idle worker slots of one queue sleep and get woken without polling.

A `Wakeup` wakes one sleeping slot per signal; a slot that finds a job signals again, so a burst
of work fans out slot by slot while a single new job wakes a single slot. The generation counter
closes the gap between "my claim found nothing" and "I am asleep": a signal that arrived during
the claim makes the slot claim again instead of sleeping through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Wakeup:
    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self.generation = 0

    async def signal(self, slots: int = 1) -> None:
        async with self._cond:
            self.generation += 1
            self._cond.notify(slots)

    async def signal_all(self) -> None:
        async with self._cond:
            self.generation += 1
            self._cond.notify_all()

    async def wait(self, seen_generation: int) -> None:
        """Sleep until a signal newer than `seen_generation` (returns at once if one came already)."""
        async with self._cond:
            if self.generation != seen_generation:
                return
            await self._cond.wait()


class DueTimer:
    """Wakes a queue when its next delayed job becomes runnable, and at the fallback poll period
    otherwise (a bounded backstop for lost notifications)."""

    def __init__(
        self, wakeup: Wakeup, fallback_sec: float, on_fire: Callable[[str], None] | None = None
    ) -> None:
        self._wakeup = wakeup
        self._fallback = fallback_sec
        self._due_at: float | None = None
        self._changed = asyncio.Event()
        self._on_fire = on_fire

    def schedule_in(self, seconds: float) -> None:
        """Ask for a wake-up `seconds` from now (kept if an earlier one is already set)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(0.0, seconds)
        if self._due_at is None or at < self._due_at:
            self._due_at = at
            self._changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last_fire = loop.time()
        while True:
            deadline = last_fire + self._fallback
            source = "poll"
            if self._due_at is not None and self._due_at <= deadline:
                deadline, source = self._due_at, "timer"
            self._changed.clear()
            timeout = deadline - loop.time()
            if timeout > 0:
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=timeout)
                    continue  # a new due time came in: recompute
                except TimeoutError:
                    pass
            if source == "timer":
                self._due_at = None
            last_fire = loop.time()
            if self._on_fire is not None:
                self._on_fire(source)
            await self._wakeup.signal(1)
