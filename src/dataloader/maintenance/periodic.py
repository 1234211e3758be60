"""The base of every service that works on a period (the reaper, and later the pruner and the stats
rollup): tick, wait a jittered period, tick again, until stopped.

A failing tick is part of normal life (the database restarts; a statement hits a bad row): it is
logged — a warning when the database is unreachable, an error with its traceback otherwise — and
retried next period. It never ends the loop, so a tick error is not a crash for the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import abstractmethod

from pydantic import Field

from dataloader import metrics
from dataloader.maintenance.service import Service, ServiceSettings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.db import is_connection_error

log = logging.getLogger("dataloader.maintenance")


class PeriodicSettings(ServiceSettings):
    period_sec: float = Field(gt=0, le=24 * 3600, description="Time between the end of a tick and the next")
    # Replicas started together would otherwise tick in lockstep and contend for the same rows.
    jitter: float = Field(default=0.1, ge=0, le=0.5, description="Each wait is period × (1 ± jitter)")


class PeriodicService(Service):
    """Runs `tick()` at start and then every period until stopped."""

    settings: PeriodicSettings

    def __init__(self, settings: PeriodicSettings, *, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None) -> None:
        super().__init__(settings, clock=clock)
        self._rng = rng or random.Random()
        self.ticks = 0

    @abstractmethod
    async def tick(self) -> object:
        """One unit of the duty. What it returns is for tests and logs only."""

    def next_delay(self) -> float:
        jitter = self.settings.jitter
        return self.settings.period_sec * self._rng.uniform(1 - jitter, 1 + jitter)

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.tick_once()
            await self.clock.wait(self.stopping, self.next_delay())

    async def tick_once(self) -> bool:
        """One guarded tick; True when it succeeded."""
        started = self.clock.monotonic()
        try:
            await self.tick()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.record_error(exc)
            if is_connection_error(exc):
                log.warning("%s: database unavailable, will retry: %s", self.name, exc,
                            extra={"service": self.name})
            else:
                log.exception("%s: tick failed", self.name, extra={"service": self.name})
            return False
        finally:
            self.ticks += 1
            self.last_tick_at = self.clock.wall()
            metrics.SERVICE_TICK_SECONDS.labels(self.name).observe(max(self.clock.monotonic() - started, 0.0))
        return True
