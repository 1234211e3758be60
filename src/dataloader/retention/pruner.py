"""The pruner: deletes finished jobs (and, by ON DELETE CASCADE, their journal rows) older than
their retention age, in small batches, on the leader only. With the journal's partitions dropped
whole (retention/partitions.py), it waits for the drop of a job's partitions first, so the
cascade finds little or nothing.

Why leader only: the delete is safe anywhere (SKIP LOCKED, re-checked under the row lock), but one
deleter is enough, and N replicas scanning the same index range in step would only contend for
the same rows and multiply the I/O. On one node the load is one batch at a time, predictable and
visible in one place; it runs beside the stats rollup, so it can leave alone the rows the rollup
has not counted yet.

Why small batches: each batch is one statement (`retention/prune_batch.sql`) over one index range
of ix_dl_jobs_finished, at most `batch_size` rows (default 1000), committed on its own. Row locks
are held for one batch only (milliseconds), and only on finished rows, which the claim (queued
rows), heartbeats and finishes (running rows) never touch: a prune can never make a claim wait.
The rules (ages per status and queue) are a `RetentionPolicy` (retention/policy.py).

With an archive (DL_ARCHIVE_URL, retention/archive.py) each batch is read, locked, exported and
only then deleted, in one transaction (`retention_repository.prune_batch_archived`): a failed export
rolls back and deletes nothing, is logged and counted (dl_archive_files_total{outcome="failed"})
and ends this prune (the report's `archive_error`); the next period tries again. A batch's file is
named after its job ids, so an export whose delete never committed is written again, not doubled.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.retention.archive import Archive, ArchiveBatch, archive_of
from dataloader.retention.partitions import JournalFloor, PartitionSettings, journal_floor
from dataloader.retention.policy import RetentionPolicy
from dataloader.storage import audit_repository, retention_repository, stats_repository

log = logging.getLogger("dataloader.retention.pruner")


# A fair queue's tenant idle this long (no queued job, not served) loses its served-at row: a day,
# so a tenant that works daily keeps its turn, and one that left does not stay a row forever.
FAIR_TENANTS_IDLE_SEC = 86_400.0


class PrunerSettings(PeriodicSettings):
    period_sec: float = Field(default=60, gt=0, le=24 * 3600, description="DL_RETENTION_PERIOD_SEC")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="DL_RETENTION_BATCH_SIZE")
    # Never delete a job the stats rollup has not counted yet (when the rollup runs).
    wait_for_stats: bool = Field(default=True)
    process_feed_sec: float = Field(default=30 * 86400, ge=3600, description="DL_RETENTION_PROCESS_FEED")
    # Fair share's served-tenant rows (0024) of tenants with no queued job, last served this long ago.
    fair_tenants_idle_sec: float = Field(default=FAIR_TENANTS_IDLE_SEC, ge=60)
    audit_sec: float = Field(default=365 * 86400, ge=86400, description="DL_AUDIT_RETENTION")

    @classmethod
    def from_settings(cls, settings: Settings) -> PrunerSettings:
        return cls(period_sec=settings.retention_period_sec, batch_size=settings.retention_batch_size,
                   wait_for_stats=settings.stats_enabled, process_feed_sec=settings.retention_process_feed,
                   audit_sec=settings.audit_retention)


@dataclass
class PruneReport:
    """What one prune deleted (or, in a dry run, would delete): jobs per (queue, status)."""

    dry_run: bool
    jobs: dict[tuple[str, str], int] = field(default_factory=dict)
    ages: dict[tuple[str, str], float] = field(default_factory=dict)
    batches: int = 0
    seconds: float = 0.0
    # With an archive: the files written, and the error of the export that stopped the prune.
    archived_files: int = 0
    archive_error: str | None = None

    @property
    def total(self) -> int:
        return sum(self.jobs.values())

    @classmethod
    def merged(cls, reports: list[PruneReport]) -> PruneReport:
        """Several shards' prunes as one report (they ran one after another)."""
        total = cls(reports[0].dry_run)
        for report in reports:
            for key, n in report.jobs.items():
                total.jobs[key] = total.jobs.get(key, 0) + n
            total.ages.update(report.ages)
            total.batches += report.batches
            total.seconds += report.seconds
            total.archived_files += report.archived_files
            total.archive_error = total.archive_error or report.archive_error
        return total

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "dry_run": self.dry_run, "total": self.total, "batches": self.batches, "seconds": round(self.seconds, 3),
            "pruned": [{"queue": q, "status": s, "jobs": n, "older_than_sec": self.ages[(q, s)]}
                       for (q, s), n in sorted(self.jobs.items()) if n]}
        if self.archived_files or self.archive_error:
            data["archived_files"] = self.archived_files
            data["archive_error"] = self.archive_error
        return data


async def finished_queues(pool: asyncpg.Pool) -> list[str]:
    return await retention_repository.finished_queues(pool)


async def stats_lag_floor(pool: asyncpg.Pool) -> float | None:
    """Seconds since the stats watermark: rows finished after it are not rolled up yet."""
    row = await stats_repository.watermark(pool)
    if row is None or row["watermark"] is None:
        return None
    return max((row["now"] - row["watermark"]).total_seconds(), 0.0)


async def prune(pool: asyncpg.Pool, policy: RetentionPolicy, *, batch_size: int = 1000,
                dry_run: bool = False, queues: Iterable[str] | None = None,
                min_age_sec: float | None = None, stopping: asyncio.Event | None = None,
                journal_floor: JournalFloor | None = None, archive: Archive | None = None) -> PruneReport:
    """Delete (or count, with `dry_run`) the finished jobs `policy` says are too old, batch by
    batch, queue by queue; `queues` limits it to some queues. `min_age_sec` keeps anything younger
    whatever the policy (the stats rollup's lag); `journal_floor` holds a job back until its
    journal partitions are dropped (retention/partitions.py), so the cascade finds little to
    delete. Stops between batches when `stopping` is set. With `archive`, each batch is exported
    there before its delete; a failed export deletes nothing and ends the prune
    (`report.archive_error`)."""
    report = PruneReport(dry_run=dry_run)
    started = time.perf_counter()
    present = await finished_queues(pool)
    wanted = present if queues is None else [q for q in present if q in set(queues)]
    for queue, status, age in policy.rules(wanted):
        if stopping is not None and stopping.is_set():
            break
        age = max(age, min_age_sec or 0.0)
        if journal_floor is not None:
            age = journal_floor.age(age)
        report.ages[(queue, status)] = age
        if dry_run:
            report.jobs[(queue, status)] = await retention_repository.count_prunable(pool, queue, status, age)
            continue
        deleted_here = 0
        while True:
            batch_started = time.perf_counter()
            if archive is None:
                deleted = await retention_repository.prune_batch(pool, queue, status, age, batch_size)
            else:
                try:
                    deleted = await _archived_batch(pool, archive, queue, status, age, batch_size)
                except Exception as exc:  # the storage refused: nothing was deleted, say so and stop
                    metrics.ARCHIVE_FILES.labels("failed").inc()
                    report.archive_error = f"{type(exc).__name__}: {exc}"
                    log.error("archive export failed: nothing deleted, the next prune tries again",
                              extra={"queue": queue, "status": status, "archive": archive.url,
                                     "error": report.archive_error})
                    report.jobs[(queue, status)] = deleted_here
                    break
                if deleted:
                    report.archived_files += 1
            metrics.PRUNE_BATCH_SECONDS.observe(time.perf_counter() - batch_started)
            report.batches += 1
            if deleted:
                metrics.JOBS_PRUNED.labels(queue, status).inc(deleted)
                deleted_here += deleted
            if deleted < batch_size or (stopping is not None and stopping.is_set()):
                break
        if report.archive_error is not None:
            break
        report.jobs[(queue, status)] = deleted_here
    report.seconds = time.perf_counter() - started
    return report


async def _archived_batch(pool: asyncpg.Pool, archive: Archive, queue: str, status: str, age: float,
                          batch_size: int) -> int:
    """One batch: locked and read, exported (file, then manifest entry), then deleted, in one
    transaction; raises (deleting nothing) when the export does."""

    async def export(jobs: Any, events: Any) -> None:
        entry = await archive.archive_batch(ArchiveBatch.of(queue, status, jobs, events))
        metrics.ARCHIVE_FILES.labels("ok").inc()
        metrics.ARCHIVE_JOBS.inc(entry.jobs)
        metrics.ARCHIVE_BYTES.inc(entry.bytes)
        metrics.ARCHIVE_LAST_SUCCESS.set(time.time())

    return await retention_repository.prune_batch_archived(pool, queue, status, age, batch_size, export)


async def prune_process_feed(pool: asyncpg.Pool, older_than_sec: float, *, batch_size: int = 1000,
                             stopping: asyncio.Event | None = None) -> int:
    """Delete the processes' event feed rows older than `older_than_sec`, batch by batch from the
    feed's head; returns how many."""
    deleted_total = await _in_batches(
        lambda: retention_repository.prune_feed_batch(pool, older_than_sec, batch_size), batch_size, stopping)
    if deleted_total:
        metrics.FEED_ROWS_PRUNED.inc(deleted_total)
    return deleted_total


async def prune_fair_tenants(pool: asyncpg.Pool, idle_sec: float, *, batch_size: int = 1000,
                             stopping: asyncio.Event | None = None) -> int:
    """Delete fair share's rows of tenants idle for `idle_sec` (retention/prune_fair_tenants_batch.sql),
    batch by batch; returns how many."""
    return await _in_batches(
        lambda: retention_repository.prune_fair_tenants_batch(pool, idle_sec, batch_size), batch_size, stopping)


async def prune_audit(pool: asyncpg.Pool, older_than_sec: float, *, batch_size: int = 1000,
                      stopping: asyncio.Event | None = None) -> int:
    """Delete the audit trail's rows older than `older_than_sec` (DL_AUDIT_RETENTION), batch by
    batch from its oldest; returns how many."""
    deleted_total = await _in_batches(
        lambda: audit_repository.prune_batch(pool, older_than_sec, batch_size), batch_size, stopping)
    if deleted_total:
        metrics.AUDIT_ROWS_PRUNED.inc(deleted_total)
    return deleted_total


async def _in_batches(delete_batch: Callable[[], Awaitable[int]], batch_size: int,
                      stopping: asyncio.Event | None) -> int:
    """Run `delete_batch` (one statement, one transaction) until a batch deletes fewer than
    `batch_size` rows or `stopping` is set (looked at before each batch); how many it deleted."""
    deleted_total = 0
    while stopping is None or not stopping.is_set():
        deleted = await delete_batch()
        deleted_total += deleted
        if deleted < batch_size:
            break
    return deleted_total


class Pruner(PeriodicService):
    name = "pruner"
    scope = Scope.LEADER

    settings: PrunerSettings

    def __init__(self, pool: asyncpg.Pool, policy: RetentionPolicy, settings: PrunerSettings | None = None, *,
                 partitions: PartitionSettings | None = None, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None, archive: Archive | None = None) -> None:
        """`partitions`: the journal partition duty's settings when it runs (its drops are waited
        for, `JournalFloor`); None: the pruner deletes by its ages alone, the cascade takes the journal."""
        super().__init__(settings or PrunerSettings(), clock=clock, rng=rng)
        self.pool = pool
        self.policy = policy
        self.partitions = partitions
        self.archive = archive

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: Settings) -> Pruner:
        partitions = PartitionSettings.from_settings(settings) if settings.journal_partitions_enabled else None
        return cls(pool, RetentionPolicy.from_settings(settings), PrunerSettings.from_settings(settings),
                   partitions=partitions, archive=archive_of(settings))

    async def tick(self) -> PruneReport:
        floor = await stats_lag_floor(self.pool) if self.settings.wait_for_stats else None
        journal = (await journal_floor(self.pool, self.policy, self.partitions, datetime.now(UTC))
                   if self.partitions is not None else None)
        report = await prune(self.pool, self.policy, batch_size=self.settings.batch_size,
                             min_age_sec=floor, stopping=self.stopping, journal_floor=journal,
                             archive=self.archive)
        if report.total:
            log.info("pruned finished jobs", extra={
                "jobs": report.total, "batches": report.batches, "seconds": round(report.seconds, 3),
                "by_queue_status": {f"{q}/{s}": n for (q, s), n in report.jobs.items() if n}})
        feed = await prune_process_feed(self.pool, self.settings.process_feed_sec,
                                        batch_size=self.settings.batch_size, stopping=self.stopping)
        if feed:
            log.info("pruned the processes' event feed", extra={"rows": feed})
        tenants = await prune_fair_tenants(self.pool, self.settings.fair_tenants_idle_sec,
                                           batch_size=self.settings.batch_size, stopping=self.stopping)
        if tenants:
            log.info("pruned fair share's idle tenants", extra={"rows": tenants})
        audit = await prune_audit(self.pool, self.settings.audit_sec, batch_size=self.settings.batch_size,
                                  stopping=self.stopping)
        if audit:
            log.info("pruned the audit trail", extra={"rows": audit})
        return report
