"""The reaper: running jobs whose lease expired go back to the queue, or end `lost`.

It runs on every node, not only on the leader: its statement (`reap_expired.sql`) takes the rows
with SKIP LOCKED, so replicas split the work instead of repeating it, and a lost lease is noticed
within one period even while no node leads (an election in progress, a leader whose connection
is being replaced).
"""

from __future__ import annotations

import logging
import random
import time

from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.repositories import JobRepository

log = logging.getLogger("dataloader.jobs.reaper")


class ReaperSettings(PeriodicSettings):
    period_sec: float = Field(default=10, gt=0, le=3600, description="DL_REAPER_PERIOD_SEC")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="Jobs taken back per statement")

    @classmethod
    def from_settings(cls, settings: Settings) -> ReaperSettings:
        return cls(period_sec=settings.reaper_period_sec)


class Reaper(PeriodicService):
    name = "reaper"
    scope = Scope.EVERY_NODE

    settings: ReaperSettings

    def __init__(self, repo: JobRepository, settings: ReaperSettings | None = None, *,
                 period: float | None = None, batch_size: int | None = None,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None) -> None:
        # `period`/`batch_size` are shorthands (tests reap with `Reaper(repo, period=1)`); they go
        # through validation like any other setting.
        values = (settings or ReaperSettings()).model_dump()
        values.update({k: v for k, v in (("period_sec", period), ("batch_size", batch_size)) if v is not None})
        super().__init__(ReaperSettings(**values), clock=clock, rng=rng)
        self.repo = repo

    async def tick(self) -> int:
        """Reap until nothing is left; returns how many jobs were taken back."""
        total = 0
        batch_size = self.settings.batch_size
        while True:
            started = time.perf_counter()
            rows = await self.repo.reap_expired(batch_size)
            metrics.REAPER_SECONDS.observe(time.perf_counter() - started)
            for row in rows:
                metrics.JOBS_REAPED.labels(row["queue"], row["status"]).inc()
                metrics.LEASE_EXPIRIES.labels(row["queue"], row["task"]).inc()
                log.warning(
                    "reaped job with expired lease",
                    extra={"job_id": str(row["job_id"]), "queue": row["queue"], "task": row["task"],
                           "attempt": row["attempt"], "new_status": row["status"]},
                )
            total += len(rows)
            if len(rows) < batch_size:
                return total
