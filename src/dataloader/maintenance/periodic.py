"""The one loop of the background duties: tick, wait for a wake-up or a delay, tick again, until
stopped. `LoopService` owns it, for a duty woken by a NOTIFY channel (the scheduler on
`dl_schedules`, the operation runner on `dl_operations`), by a time it computes (the next due tick,
the end of a lease), or both; `PeriodicService` is the common case of a jittered period (the
reaper, the queue-time checker, the pruner, the stats rollup).

A failing tick is part of normal life (the database restarts; a statement hits a bad row): it is
logged — a warning when the database is unreachable, an error with its traceback otherwise — and
retried at the next wake-up. It never ends the loop, so a tick error is not a crash for the
supervisor. A duty implements `tick()` (and, when the period is not its clock, `next_delay()`);
it writes no loop, no try/except around its tick and no listener of its own.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import abstractmethod
from typing import Any, ClassVar

from pydantic import Field

from dataloader import metrics
from dataloader.maintenance.service import Service, ServiceSettings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.notifier import Notifier, Subscription

log = logging.getLogger("dataloader.maintenance")


class LoopService(Service):
    """Runs `set_up()` once per run, `tick()` at start, then again after `next_delay()` seconds or
    sooner when woken (`wake()`, a NOTIFY on `channel` heard by the node's `notifier`, a stop),
    until stopped. A notification missed while the notifier was away wakes it too (it re-reads).

    Per-run state is reset in `on_start()`; what must not outlive a run is undone in `on_stop()`."""

    # The LISTEN channel whose notifications wake the duty (None: woken by time and stop only).
    channel: ClassVar[str | None] = None
    # Where a failed tick is logged, and with which words (each duty keeps the words it always had).
    logger: ClassVar[logging.Logger] = log
    failure_message: ClassVar[str] = "tick failed"

    def __init__(self, settings: ServiceSettings, *, clock: Clock = SYSTEM_CLOCK, dsn: str | None = None,
                 notifier: Notifier | None = None) -> None:
        """`notifier`: the node's listening session, where `channel` is heard. Without one, a
        `dsn` gives the duty a session of its own for its runs (a duty run alone, as in tests);
        with neither, it wakes on time only."""
        super().__init__(settings, clock=clock)
        self.dsn = dsn
        self.notifier = notifier
        self.ticks = 0
        self.last_tick_ok = True  # whether the last tick succeeded (a failed one may retry sooner)
        self.last_result: Any = None  # what the last successful tick returned
        self._set_up_done = False

    @abstractmethod
    async def tick(self) -> object:
        """One unit of the duty. What it returns is kept in `last_result` (for `next_delay`, tests, logs)."""

    @abstractmethod
    def next_delay(self) -> float:
        """Seconds to wait after a tick, unless woken sooner."""

    async def set_up(self) -> None:
        """Work due once per run before the first tick; it fails like a tick and is tried again
        before the next one until it succeeded."""

    def on_start(self) -> None:
        """Reset per-run state (a restarted duty starts fresh)."""

    def on_stop(self) -> None:
        """Undo what must not outlive a run; called however the run ends."""

    async def run(self) -> None:
        self.fresh_wake()
        self._set_up_done = False
        self.on_start()
        notifier = self.notifier
        owned = notifier is None and self.channel is not None and self.dsn is not None
        if owned:
            notifier = Notifier(self.dsn)
        subscription: Subscription | None = None
        try:
            if notifier is not None and self.channel is not None:
                # Listening before the first tick: a change committed after the tick's read wakes
                # the wait below; one sent before the notifier (re)connects calls `wake` then.
                subscription = await notifier.subscribe(self.channel, self._notified, on_missed=self.wake)
                await notifier.start()
            while not self.stopping.is_set():
                self._wake.clear()  # before the tick: a NOTIFY committed after this wakes the wait below
                self.last_tick_ok = await self.tick_once()
                await self.clock.wait(self._wake, self.next_delay())
        finally:
            try:
                if subscription is not None and notifier is not None:
                    await notifier.unsubscribe(subscription)
                if owned and notifier is not None:
                    await notifier.close()
            finally:
                self.on_stop()

    def _notified(self, _payload: str) -> None:
        self.wake()

    async def tick_once(self) -> bool:
        """One guarded tick; True when it succeeded."""
        started = self.clock.monotonic()
        try:
            if not self._set_up_done:
                await self.set_up()
                self._set_up_done = True
            self.last_result = await self.tick()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.report_failure(exc, f"{self.name}: {self.failure_message}",
                                unavailable=f"{self.name}: database unavailable, will retry", logger=self.logger)
            return False
        finally:
            self.ticks += 1
            self.last_tick_at = self.clock.wall()
            metrics.SERVICE_TICK_SECONDS.labels(self.name).observe(max(self.clock.monotonic() - started, 0.0))
        return True


class PeriodicSettings(ServiceSettings):
    period_sec: float = Field(gt=0, le=24 * 3600, description="Time between the end of a tick and the next")
    # Replicas started together would otherwise tick in lockstep and contend for the same rows.
    jitter: float = Field(default=0.1, ge=0, le=0.5, description="Each wait is period × (1 ± jitter)")


class PeriodicService(LoopService):
    """Runs `tick()` at start and then every jittered period (sooner when woken) until stopped."""

    settings: PeriodicSettings

    def __init__(self, settings: PeriodicSettings, *, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None, dsn: str | None = None, notifier: Notifier | None = None) -> None:
        super().__init__(settings, clock=clock, dsn=dsn, notifier=notifier)
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        jitter = self.settings.jitter
        return self.settings.period_sec * self._rng.uniform(1 - jitter, 1 + jitter)
