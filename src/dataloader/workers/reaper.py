"""The reaper: running jobs whose lease expired go back to the queue, or end `lost`."""

from __future__ import annotations

import logging
import time

from dataloader import metrics
from dataloader.storage.repositories import JobRepository
from dataloader.workers.periodic import PeriodicDuty

log = logging.getLogger(__name__)


class Reaper(PeriodicDuty):
    name = "reaper"

    def __init__(self, repo: JobRepository, period: float, batch_size: int = 1000) -> None:
        super().__init__(period)
        self.repo = repo
        self.batch_size = batch_size

    async def tick(self) -> int:
        """Reap until nothing is left; returns how many jobs were taken back."""
        total = 0
        while True:
            started = time.perf_counter()
            rows = await self.repo.reap_expired(self.batch_size)
            metrics.REAPER_SECONDS.observe(time.perf_counter() - started)
            for row in rows:
                metrics.JOBS_REAPED.labels(row["queue"], row["status"]).inc()
                log.warning(
                    "reaped job with expired lease",
                    extra={"job_id": str(row["job_id"]), "queue": row["queue"], "task": row["task"],
                           "attempt": row["attempt"], "new_status": row["status"]},
                )
            total += len(rows)
            if len(rows) < self.batch_size:
                return total
