"""The queue-time checker (seed 002's taskTimeout): queued jobs that have waited to start
longer than their queue's limit are flagged (`queue_overdue_at`, a `queue_overdue` journal row,
dl_queue_time_expiries_total) or, for a queue set to fail them, failed with reason
`queue_timeout`.

Every node runs it, like the reaper: its statement takes rows with SKIP LOCKED and changes a row
only if it is still queued and not flagged since it last became runnable (a compare-and-set), so
checkers on several nodes split the work and never count a job twice. After its first full pass a
checker looks back only a few periods past each limit, so a long backlog already flagged is not
read again on every tick.
"""

from __future__ import annotations

import logging

from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.storage.operation_repository import QueueTimeRepository

log = logging.getLogger("dataloader.jobs.queue_time")


class QueueTimeSettings(PeriodicSettings):
    period_sec: float = Field(default=15, gt=0, le=3600, description="DL_QUEUE_TIME_PERIOD_SEC")
    default_limit_sec: float = Field(default=0, ge=0, description="DL_QUEUE_TIME_LIMIT_SEC (0: none)")
    default_fail: bool = False
    limits: dict[str, tuple[float, bool]] = Field(default_factory=dict, description="queue -> (limit, fail)")
    batch_size: int = Field(default=1000, ge=1, le=100_000)

    @classmethod
    def from_settings(cls, settings: Settings) -> QueueTimeSettings:
        return cls(period_sec=settings.queue_time_period_sec, default_limit_sec=settings.queue_time_limit_sec,
                   default_fail=settings.queue_time_fail,
                   limits={q: (float(v["limit"]), bool(v["fail"])) for q, v in settings.queue_time_limits_json.items()})

    @property
    def enabled(self) -> bool:
        return self.default_limit_sec > 0 or any(limit > 0 for limit, _ in self.limits.values())


class QueueTimeChecker(PeriodicService):
    name = "queue_time"
    scope = Scope.EVERY_NODE

    settings: QueueTimeSettings

    def __init__(self, repo: QueueTimeRepository, settings: QueueTimeSettings, **kwargs: object) -> None:
        super().__init__(settings, **kwargs)  # type: ignore[arg-type]
        self.repo = repo
        self._full_pass_done = False

    def on_start(self) -> None:
        self._full_pass_done = False  # per run: a restarted checker reads everything once again

    async def tick(self) -> int:
        """Flag or fail every overdue job; returns how many were changed."""
        s = self.settings
        # Jobs that became overdue since the last pass are within a few periods of each limit.
        lookback = None if not self._full_pass_done else 4 * s.period_sec * (1 + s.jitter) + 60
        total = 0
        while True:
            rows = await self.repo.flag_overdue(s.limits, s.default_limit_sec, s.default_fail, s.batch_size, lookback)
            for row in rows:
                action = "failed" if row["status"] == "failed" else "flagged"
                metrics.QUEUE_TIME_EXPIRIES.labels(row["queue"], row["task"], action).inc()
            if rows:
                log.warning("jobs waited past their queue's time limit",
                            extra={"jobs": len(rows), "queues": sorted({r["queue"] for r in rows})})
            total += len(rows)
            if len(rows) < s.batch_size:
                break
        self._full_pass_done = True
        return total
