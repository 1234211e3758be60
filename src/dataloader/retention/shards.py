"""Retention and stats over every shard (docs/scaling.md "Past one primary"): what `App.prune`,
`App.rollup_stats`, `App.stats` and `App.stats_errors` do on each shard's pool, and how the
shards' reports merge into one. With one shard, each runs once on its pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from dataloader.config import Settings
from dataloader.model.job import FINISHED_STATUS_NAMES, JobStatus
from dataloader.retention.archive import Archive, archive_of
from dataloader.retention.partitions import partition_status
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import PruneReport, prune
from dataloader.retention.rollup import read_errors, read_stats, rollup
from dataloader.storage.audit_repository import record_prune


def chosen_policy(settings: Settings, older_than: float | timedelta | str | None,
                  statuses: Sequence[JobStatus | str] | None) -> RetentionPolicy:
    """The policy of a prune asked for now: without `older_than`, the configured one (limited to
    `statuses`); with it (seconds, a timedelta or "7d"), that age for `statuses` (default: every
    finished status). ValueError for a negative age or a status that is not finished."""
    if older_than is None:
        policy = RetentionPolicy.from_settings(settings)
        if not statuses:
            return policy
        keep = {str(JobStatus(s).value) for s in statuses}
        return RetentionPolicy({k: v for k, v in policy.ages.items() if k in keep},
                               {q: {k: v for k, v in a.items() if k in keep} for q, a in policy.queues.items()})
    seconds = (older_than.total_seconds() if isinstance(older_than, timedelta)
               else Settings.duration_seconds(older_than))
    if seconds < 0:
        raise ValueError("older_than must not be negative")
    chosen = [str(JobStatus(s).value) for s in statuses] if statuses else list(FINISHED_STATUS_NAMES)
    bad = sorted(set(chosen) - set(FINISHED_STATUS_NAMES))
    if bad:
        raise ValueError(f"only finished jobs can be pruned, not {bad}")
    return RetentionPolicy.uniform(seconds, chosen)


async def prune_shards(pools: Sequence[asyncpg.Pool], settings: Settings, *, older_than: float | timedelta | str | None,
                       statuses: Sequence[JobStatus | str] | None, batch_size: int | None, dry_run: bool,
                       queues: Sequence[str] | None, archive: Archive | None = None) -> PruneReport:
    """The policy of a prune asked for now (`chosen_policy`) applied on every shard in turn, in
    batches of `batch_size` (default DL_RETENTION_BATCH_SIZE), each exported first to `archive`
    (default: DL_ARCHIVE_URL's, when set); one report (the shards' summed)."""
    policy = chosen_policy(settings, older_than, statuses)
    batch_size = batch_size or settings.retention_batch_size
    archive = archive if archive is not None or dry_run else archive_of(settings)
    reports = [await prune(pool, policy, batch_size=batch_size, dry_run=dry_run, queues=queues, archive=archive)
               for pool in pools]
    report = reports[0] if len(reports) == 1 else PruneReport.merged(reports)
    if not dry_run:  # a prune asked for by someone (not the pruner's own duty) is audited
        await record_prune(pools[0], {"older_than": older_than, "statuses": statuses, "queues": queues,
                                      "jobs": report.total})
    return report


async def rollup_shards(pools: Sequence[asyncpg.Pool], settings: Settings) -> int:
    """Every shard's rollup; how many jobs were counted on all of them."""
    return sum([await rollup(pool, lag_sec=settings.stats_lag_sec, keep_sec=settings.stats_keep) for pool in pools])


async def stats_shards(pools: Sequence[asyncpg.Pool], *, queue: str | None, start: datetime | None,
                       end: datetime | None, hours: float, unrolled: bool) -> dict[str, Any]:
    """The stats of every shard in one report, from `start` (default: `end - hours`) to `end`
    (default: now): the queues of all, and the rollup's watermark the oldest of theirs (None
    unless every shard has one). One queue lives on one shard: one pool."""
    end = end or datetime.now(UTC)
    start = start or end - timedelta(hours=hours)
    if start > end:
        raise ValueError("start must not be after end")
    reports = [await read_stats(pool, queue=queue, start=start, end=end, unrolled=unrolled) for pool in pools]
    if len(reports) == 1:
        return reports[0]
    merged = dict(reports[0])
    merged["queues"] = sorted((q for r in reports for q in r["queues"]), key=lambda q: q["queue"])
    watermarks = [r["rolled_up_to"] for r in reports if r["rolled_up_to"] is not None]
    merged["rolled_up_to"] = min(watermarks) if len(watermarks) == len(reports) else None
    return merged


async def errors_shards(pools: Sequence[asyncpg.Pool], *, queue: str | None, since: datetime | None,
                        limit: int) -> dict[str, Any]:
    """The error groups of every shard since `since` (default: an hour ago), most frequent first,
    the first `limit` of all."""
    since = since or datetime.now(UTC) - timedelta(hours=1)
    reports = [await read_errors(pool, queue=queue, since=since, limit=limit) for pool in pools]
    if len(reports) == 1:
        return reports[0]
    errors = sorted((e for r in reports for e in r["errors"]), key=lambda e: -e["jobs"])
    return {**reports[0], "errors": errors[:limit]}


async def partitions_shards(pools: Sequence[asyncpg.Pool], settings: Settings) -> dict[str, Any]:
    """The journal's partitions of the first database (retention/partitions.py), the other shards'
    under "shards" (each database has its own journal)."""
    reports = [await partition_status(pool, settings) for pool in pools]
    return reports[0] if len(reports) == 1 else {**reports[0], "shards": reports[1:]}
