"""One reading of the database's health for /metrics, and the WARNING that names the backend
holding back the xmin horizon.

A scrape must never fail and must stay cheap: the reading runs under one short timeout, each part
of it on its own (health_repository), and whatever could not be read is left out of the page
(`dl_db_health_up{part}` = 0) instead of failing it or showing an old value. The warning is
written at most once a minute per process, however often Prometheus scrapes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dataloader.health.storage import TREND_WINDOW_SEC, StorageReport, storage_report
from dataloader.storage.health_repository import PARTS, HealthRepository, HealthRows

log = logging.getLogger("dataloader.health")

# The most rows a per-queue count walks (a count at the cap means "at least this many").
COUNT_CAP = 10_000
# The warning about a transaction holding the xmin horizon repeats at most this often per process.
XMIN_WARN_EVERY_SEC = 60.0


@dataclass
class HealthSnapshot:
    """One reading: the database's rows (parts that failed are absent) and this node's budget."""

    rows: HealthRows
    connections_budget: int


class HealthReader:
    def __init__(self, repo: HealthRepository, *, connections_budget: Callable[[], int], xmin_warn_sec: float,
                 timeout_sec: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.repo = repo
        self.connections_budget = connections_budget
        self.xmin_warn_sec = xmin_warn_sec
        self.timeout_sec = timeout_sec
        self.clock = clock
        self._warned_at: float | None = None

    async def read(self) -> HealthSnapshot:
        try:
            async with asyncio.timeout(self.timeout_sec):
                rows = await self.repo.read(cap=COUNT_CAP)
        except Exception as exc:  # the database is away or slow: the scrape still answers
            rows = HealthRows(errors={part: repr(exc) for part in PARTS})
            log.warning("metrics: database health unavailable", extra={"error": repr(exc)})
        self._warn_on_xmin(rows)
        return HealthSnapshot(rows=rows, connections_budget=self.connections_budget())

    async def storage(self, *, window_sec: float = TREND_WINDOW_SEC) -> StorageReport:
        """The queue's tables in the leader's newest storage sample (sizes, dead tuples, last
        autovacuum and autoanalyze), how each grew over 1 h, 6 h and 24 h, its hourly trend over
        `window_sec`, and what holds the xmin horizon now (docs/observability.md "Storage")."""
        return storage_report(await self.repo.latest_storage(), await self.repo.storage_trend(window_sec),
                              await self.repo.oldest_xmin())

    async def sample_storage(self) -> StorageReport:
        """Take a storage sample now (what the leader's storage_sampler does every period), then the report."""
        await self.repo.sample_storage()
        return await self.storage()

    def _warn_on_xmin(self, rows: HealthRows) -> None:
        holders = rows.rows.get("oldest_xmin") or []
        if not holders or (holders[0]["age_sec"] or 0) < self.xmin_warn_sec:
            return
        now = self.clock()
        if self._warned_at is not None and now - self._warned_at < XMIN_WARN_EVERY_SEC:
            return
        self._warned_at = now
        h = holders[0]
        log.warning(
            "a transaction has held back the xmin horizon for %.0f s: VACUUM cannot clean dl_jobs and "
            "dl_job_events while it stays open (end it, or find its client by pid and application_name)",
            h["age_sec"],
            extra={"holder_kind": h["kind"], "pid": h["pid"], "application_name": h["application_name"],
                   "state": h["state"], "xact_start": h["xact_start"], "query_start": h["query_start"],
                   "query": h["query"], "xmin_age_sec": round(h["age_sec"], 1),
                   "xmin_age_xids": h["max_xid_age"]},
        )
