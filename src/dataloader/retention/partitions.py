"""The journal's partitions (migration 0039): created ahead, and old ones dropped whole, so the bulk
of the history goes by DROP TABLE (no dead tuple, no vacuum, WAL of a catalog change) instead of
a DELETE per row through the cascade from dl_jobs (issue 39; docs/retention.md).

The interval: one day by default. It is chosen from the retention of succeeded jobs (the bulk of
any queue), the *journal horizon* H: a day when H is at least 4 days (the default 7 days), else an
hour. A day is at most a quarter of H, so a finished job waits at most about a day past its age
for its partition to go (see `JournalFloor`); it keeps the partitions few (H / interval + those
ahead + the DEFAULT: ~11 by default), and every lookup of a job's history by job_id probes each
partition's index once; and it is one CREATE and one DROP a day.

A partition [a, b) is dropped once b <= now - H. Its rows of jobs the policy still keeps (queued,
running, held, a status kept for ever, finished within a longer age such as failed's 30 days) are
copied in the same transaction into the DEFAULT partition, keeping their ts and event_id, so such a
job's history stays whole and true; the pruner deletes them later with the job (the cascade finds
them there). Expired jobs that could come back (a retry of a failed job) are locked until the drop
commits (queries/retention/journal_lock_expired.sql). The pruner waits for the drop of the
partitions a job's rows are in before deleting it (`JournalFloor`), at most one interval and one
hour past the job's age, so the cascade finds nothing in the common case and the pruner is never
stopped by a duty that is not running.

With DL_JOURNAL_PARTITIONS_DROP=false (delete mode) no partition goes with its rows: the pruner's
cascade deletes the journal row by row, as before 0039, and the duty drops a partition past the
horizon only once it holds no row (`drop_emptied`), since an emptied range takes no new row and
would keep its indexes' pages for ever.

The archival hook: `before_drop(partition)` is awaited before each drop with the partition's
name and [range_from, range_to) (range_from None: from the beginning); it may export the rows. If
it raises, that partition is not dropped this time (retried at the next tick).

Leader only, like the pruner: one node issuing the DDL is enough, and two would only wait on each
other's locks. Every DDL runs with a short lock_timeout, so it never builds a lock queue that the
claims would wait behind; a timeout is retried at the next tick.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg
from pydantic import Field

from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.model.job import FINISHED_STATUS_NAMES
from dataloader.retention.policy import RetentionPolicy
from dataloader.storage import retention_repository

log = logging.getLogger("dataloader.retention.partitions")

PARENT = "dl_job_events"
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
# How long past its interval the pruner waits for a partition's drop before the cascade does it.
FLOOR_GRACE = HOUR


@dataclass(frozen=True)
class JournalPartition:
    """One partition of the journal: [range_from, range_to); range_from None: from MINVALUE (the
    rows from before 0039); is_default: the DEFAULT partition (no range)."""

    name: str
    range_from: datetime | None
    range_to: datetime | None
    is_default: bool = False
    rows_estimate: int | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "from": self.range_from, "to": self.range_to, "default": self.is_default,
                "rows_estimate": self.rows_estimate, "bytes": self.bytes}


BeforeDrop = Callable[[JournalPartition], Awaitable[None]]


class PartitionSettings(PeriodicSettings):
    period_sec: float = Field(default=600, gt=0, le=24 * 3600, description="DL_JOURNAL_PARTITIONS_PERIOD_SEC")
    interval: Literal["auto", "day", "hour"] = Field(default="auto", description="DL_JOURNAL_PARTITIONS_INTERVAL")
    ahead: int = Field(default=3, ge=1, le=100, description="DL_JOURNAL_PARTITIONS_AHEAD")
    drop: bool = Field(default=True, description="DL_JOURNAL_PARTITIONS_DROP")
    lock_timeout_sec: float = Field(default=0.5, gt=0, le=60, description="DL_JOURNAL_PARTITIONS_LOCK_TIMEOUT_SEC")
    wait_for_stats: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> PartitionSettings:
        return cls(period_sec=settings.journal_partitions_period_sec, interval=settings.journal_partitions_interval,
                   ahead=settings.journal_partitions_ahead, drop=settings.journal_partitions_drop,
                   lock_timeout_sec=settings.journal_partitions_lock_timeout_sec,
                   wait_for_stats=settings.stats_enabled)


# -- pure decisions ---------------------------------------------------------------------------

def journal_horizon(policy: RetentionPolicy) -> float | None:
    """Seconds after which the journal's partitions go: the default age of succeeded jobs; None
    when succeeded jobs are kept (then no partition is dropped)."""
    return policy.ages.get("succeeded")


def choose_interval(horizon: float | None, setting: str = "auto") -> timedelta:
    """The partitions' width: the setting, or with "auto" a day when the horizon is at least four
    days (or there is none), else an hour."""
    if setting == "day":
        return DAY
    if setting == "hour":
        return HOUR
    if setting != "auto":
        raise ValueError(f"not a partition interval: {setting!r} (auto, day or hour)")
    return DAY if horizon is None or horizon >= 4 * DAY.total_seconds() else HOUR


def floor_boundary(moment: datetime, interval: timedelta) -> datetime:
    """The start of the interval holding `moment` (UTC midnights or hours)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    step = interval.total_seconds()
    return epoch + timedelta(seconds=math.floor((moment - epoch).total_seconds() / step) * step)


def partition_name(start: datetime, interval: timedelta) -> str:
    start = start.astimezone(UTC)
    if interval >= DAY and (start.hour, start.minute) == (0, 0):
        return f"{PARENT}_p{start:%Y%m%d}"
    return f"{PARENT}_p{start:%Y%m%d_%H%M}"


def partitions_ahead(existing: Sequence[JournalPartition], now: datetime, interval: timedelta,
                     ahead: int) -> list[tuple[str, datetime, datetime]]:
    """The partitions to create so that ranges reach `ahead` intervals past now: from the last
    range's end when it is still ahead of now, else from the next boundary after now (a range
    that starts in the past could hold rows in the DEFAULT partition already, which would refuse
    the attach; those rows stay there and go with their jobs)."""
    ends = [p.range_to for p in existing if p.range_to is not None and not p.is_default]
    last = max(ends) if ends else None
    start = last if last is not None and last > now else floor_boundary(now, interval) + interval
    horizon = now + ahead * interval
    planned = []
    while start < horizon:
        end = floor_boundary(start, interval) + interval
        planned.append((partition_name(start, interval), start, end))
        start = end
    return planned


def due_partitions(existing: Sequence[JournalPartition], now: datetime,
                   horizon: float | None) -> list[JournalPartition]:
    """The range partitions wholly older than the horizon, oldest first (none without one)."""
    if horizon is None:
        return []
    cut = now - timedelta(seconds=horizon)
    return sorted((p for p in existing if not p.is_default and p.range_to is not None and p.range_to <= cut),
                  key=lambda p: p.range_to or now)


def policy_parameters(policy: RetentionPolicy, floor_sec: float | None
                      ) -> tuple[list[str], list[float], list[str], list[str], list[float], float]:
    """The policy as journal_expired.sql's parameters $1-$6: default statuses and ages, the
    per-queue overrides as three parallel arrays, and the floor (the stats rollup's lag)."""
    statuses = [s for s in FINISHED_STATUS_NAMES if s in policy.ages]
    overrides = [(q, s, a) for q, ages in sorted(policy.queues.items()) for s, a in sorted(ages.items())]
    return (statuses, [float(policy.ages[s]) for s in statuses], [o[0] for o in overrides],
            [o[1] for o in overrides], [float(o[2]) for o in overrides], float(floor_sec or 0.0))


@dataclass(frozen=True)
class JournalFloor:
    """What the pruner waits for: a job finished before `oldest_start` (the lower bound of the
    oldest range partition left; None: the legacy partition from MINVALUE is still there) has no
    row in a range partition any more, so deleting it cascades to nothing. A rule whose age is at
    least the horizon waits for that, at most `interval` + FLOOR_GRACE past its age (a stalled
    duty never stops the pruner); a shorter rule (its partition goes much later) does not wait,
    and the cascade deletes its rows."""

    horizon: float
    oldest_start: datetime | None
    now: datetime
    interval: timedelta

    def age(self, age: float) -> float:
        if age < self.horizon or self.oldest_start is None:
            # a shorter rule, or the legacy partition (the rows from before 0039) still there: its
            # drop comes at most one horizon after the migration, and until then the cascade works
            # as it did before it
            return age
        cap = age + (self.interval + FLOOR_GRACE).total_seconds()
        return max(age, min((self.now - self.oldest_start).total_seconds(), cap))


# -- the database side ------------------------------------------------------------------------

async def list_partitions(pool: asyncpg.Pool) -> list[JournalPartition]:
    return [JournalPartition(name=r["name"], range_from=r["range_from"], range_to=r["range_to"],
                             is_default=r["is_default"], rows_estimate=r["rows_estimate"], bytes=r["bytes"])
            for r in await retention_repository.journal_partitions(pool)]


async def journal_floor(pool: asyncpg.Pool, policy: RetentionPolicy, settings: PartitionSettings,
                        now: datetime) -> JournalFloor | None:
    """The pruner's floor when the journal's partitions are dropped (None: they are not)."""
    horizon = journal_horizon(policy)
    if horizon is None or not settings.drop:
        return None
    existing = await list_partitions(pool)
    if not existing:
        return None
    starts = [p.range_from for p in existing if not p.is_default and p.range_to is not None]
    oldest = None if any(s is None for s in starts) else min(starts, default=now)  # type: ignore[type-var]
    return JournalFloor(horizon, oldest, now, choose_interval(horizon, settings.interval))


@dataclass
class DropResult:
    partition: JournalPartition
    staged: int = 0
    kept: int = 0
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.partition.to_dict(), "staged": self.staged, "kept": self.kept,
                "seconds": round(self.seconds, 3), "error": self.error}


@dataclass
class PartitionTick:
    created: list[str] = field(default_factory=list)
    dropped: list[DropResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # creations that timed out on a lock


async def create_ahead(pool: asyncpg.Pool, now: datetime, interval: timedelta, ahead: int, *,
                       lock_timeout_sec: float = 0.5) -> PartitionTick:
    tick = PartitionTick()
    for name, start, end in partitions_ahead(await list_partitions(pool), now, interval, ahead):
        try:
            if await retention_repository.attach_journal_partition(pool, name, start, end,
                                                                   _pg_duration(lock_timeout_sec)):
                tick.created.append(name)
        except asyncpg.LockNotAvailableError:
            tick.skipped.append(name)
            break  # ranges stay contiguous: the next tick starts from here again
    return tick


async def drop_due(pool: asyncpg.Pool, policy: RetentionPolicy, now: datetime, *, floor_sec: float | None = None,
                   before_drop: BeforeDrop | None = None, lock_timeout_sec: float = 0.5,
                   clock: Clock = SYSTEM_CLOCK) -> list[DropResult]:
    """Drop every partition older than the journal horizon, oldest first, keeping survivors'
    rows; `before_drop` is awaited first for each (an exception there, or a lock timeout, leaves
    the partition for the next tick and stops this round)."""
    results = []
    params = policy_parameters(policy, floor_sec)
    for partition in due_partitions(await list_partitions(pool), now, journal_horizon(policy)):
        result = DropResult(partition)
        results.append(result)
        started = clock.monotonic()
        try:
            if before_drop is not None:
                await before_drop(partition)
            result.staged, result.kept = await retention_repository.drop_journal_partition(
                pool, partition.name, partition.range_from, partition.range_to or now, params,
                _pg_duration(lock_timeout_sec))
        except Exception as exc:  # the hook's or the database's: retried at the next tick
            result.error = f"{type(exc).__name__}: {exc}"
            log.warning("journal partition not dropped", extra={"partition": partition.name, "error": result.error})
            break
        finally:
            result.seconds = clock.monotonic() - started
    return results


async def drop_emptied(pool: asyncpg.Pool, now: datetime, horizon: float | None, *, lock_timeout_sec: float = 0.5,
                       clock: Clock = SYSTEM_CLOCK) -> list[DropResult]:
    """Delete mode (DL_JOURNAL_PARTITIONS_DROP=false): the pruner's cascade empties a partition past
    the horizon row by row, but an emptied partition keeps its indexes' pages for ever (a range in
    the past takes no new row to reuse them: bench/sustained.py's delete run grew the journal's
    indexes by one partition's worth each interval). Drop every partition past the horizon that
    holds no row; one with rows (of jobs still kept) stays until the pruner has emptied it. A
    partition whose statistics still count rows is not read (vacuum has not passed since it was
    emptied, and the look would read every dead row)."""
    results = []
    for partition in due_partitions(await list_partitions(pool), now, horizon):
        if partition.rows_estimate:
            continue
        result = DropResult(partition)
        started = clock.monotonic()
        try:
            dropped = await retention_repository.drop_empty_journal_partition(pool, partition.name,
                                                                              _pg_duration(lock_timeout_sec))
        except Exception as exc:  # a lock timeout: retried at the next tick
            result.error = f"{type(exc).__name__}: {exc}"
            log.warning("empty journal partition not dropped", extra={"partition": partition.name,
                                                                       "error": result.error})
            results.append(result)
            break
        result.seconds = clock.monotonic() - started
        if dropped:
            results.append(result)
    return results


def _pg_duration(seconds: float) -> str:
    return f"{max(int(seconds * 1000), 1)}ms"


async def partition_status(pool: asyncpg.Pool, settings: Settings, *, now: datetime | None = None) -> dict[str, Any]:
    """What the faces show: whether the journal is partitioned, the interval and horizon, every
    partition with its range and row estimate, and the next drop (which partition, from when)."""
    now = now or datetime.now(UTC)
    policy = RetentionPolicy.from_settings(settings)
    horizon = journal_horizon(policy)
    part_settings = PartitionSettings.from_settings(settings)
    interval = choose_interval(horizon, part_settings.interval)
    existing = await list_partitions(pool)
    drops = settings.journal_partitions_enabled and part_settings.drop and horizon is not None
    ranges = sorted((p for p in existing if not p.is_default and p.range_to is not None),
                    key=lambda p: p.range_to or now)
    next_drop = None
    if drops and ranges:
        oldest = ranges[0]
        assert oldest.range_to is not None and horizon is not None
        next_drop = {"partition": oldest.name, "at": oldest.range_to + timedelta(seconds=horizon)}
    return {"partitioned": bool(existing), "enabled": settings.journal_partitions_enabled,
            "drop": drops, "interval_sec": interval.total_seconds(), "horizon_sec": horizon,
            "ahead": part_settings.ahead, "now": now, "next_drop": next_drop,
            "partitions": [p.to_dict() for p in existing]}


class JournalPartitioner(PeriodicService):
    """The leader's duty: create the journal's partitions ahead, drop the ones past the horizon."""

    name = "journal_partitions"
    scope = Scope.LEADER

    settings: PartitionSettings

    def __init__(self, pool: asyncpg.Pool, policy: RetentionPolicy, settings: PartitionSettings | None = None, *,
                 before_drop: BeforeDrop | None = None, clock: Clock = SYSTEM_CLOCK,
                 rng: random.Random | None = None) -> None:
        super().__init__(settings or PartitionSettings(), clock=clock, rng=rng)
        self.pool = pool
        self.policy = policy
        self.before_drop = before_drop

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: Settings, *,
                      before_drop: BeforeDrop | None = None) -> JournalPartitioner:
        return cls(pool, RetentionPolicy.from_settings(settings), PartitionSettings.from_settings(settings),
                   before_drop=before_drop)

    async def tick(self) -> PartitionTick:
        from dataloader.retention.pruner import stats_lag_floor

        now = datetime.now(UTC)
        horizon = journal_horizon(self.policy)
        interval = choose_interval(horizon, self.settings.interval)
        if not await list_partitions(self.pool):
            return PartitionTick()  # not partitioned (a database below 0039)
        tick = await create_ahead(self.pool, now, interval, self.settings.ahead,
                                  lock_timeout_sec=self.settings.lock_timeout_sec)
        if self.settings.drop and horizon is not None:
            floor = await stats_lag_floor(self.pool) if self.settings.wait_for_stats else None
            tick.dropped = await drop_due(self.pool, self.policy, now, floor_sec=floor, before_drop=self.before_drop,
                                          lock_timeout_sec=self.settings.lock_timeout_sec, clock=self.clock)
        elif horizon is not None:
            tick.dropped = await drop_emptied(self.pool, now, horizon, lock_timeout_sec=self.settings.lock_timeout_sec,
                                              clock=self.clock)
        if tick.created or tick.dropped or tick.skipped:
            log.info("journal partitions", extra={
                "created": tick.created, "skipped": tick.skipped,
                "dropped": [d.to_dict() for d in tick.dropped]})
        return tick
