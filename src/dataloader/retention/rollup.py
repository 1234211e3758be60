"""The stats rollup: hourly buckets of finished work per queue and status (counts, run and wait
time sums, histograms for the p95, failures grouped by error text), kept by a leader-only service,
and the reads that turn them into a report.

Why a rollup rather than reading dl_jobs through an index: a report over a month would otherwise
read every job of that month (millions of rows, however well indexed), and the numbers of the
jobs the pruner has deleted would be gone. The rollup reads each finished job once, shortly after
it finished (`stats/rollup.sql`, one index range per queue and status), and a report reads a few
rows per queue and hour. Why leader only: the watermark makes a second node harmless (it waits on
the watermark's row lock and then has nothing to do), but one node doing it is the whole job.

Incremental and exact: each tick rolls up the jobs with `finished_at` in [watermark, now - lag)
and moves the watermark in the same transaction. `lag` (DL_STATS_LAG_SEC, default 60 s) covers
the transactions still open when the tick runs: `finished_at` is the finishing transaction's
start, so a finish that commits later than `lag` after its start (a pipeline's own
ctx.transaction() held open for minutes) would be missed; the engine's finish batches commit in
milliseconds. What run and wait time mean: retention/stats.py.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.retention import stats as stats_rules
from dataloader.storage import stats_repository

log = logging.getLogger("dataloader.retention.rollup")

# The largest window one rollup statement covers: a backlog (first start on an old database, a
# leader that was away) is caught up hour by hour, each hour its own transaction.
MAX_WINDOW = timedelta(hours=1)


class StatsSettings(PeriodicSettings):
    period_sec: float = Field(default=60, gt=0, le=3600, description="DL_STATS_PERIOD_SEC")
    lag_sec: float = Field(default=60, ge=0, le=1800, description="DL_STATS_LAG_SEC")
    keep_sec: float = Field(default=90 * 86400, ge=86400, le=3650 * 86400, description="DL_STATS_KEEP")

    @classmethod
    def from_settings(cls, settings: Settings) -> StatsSettings:
        return cls(period_sec=settings.stats_period_sec, lag_sec=settings.stats_lag_sec,
                   keep_sec=settings.stats_keep)


def hour_floor(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


async def rollup(pool: asyncpg.Pool, *, lag_sec: float, keep_sec: float, stopping: Any = None) -> int:
    """Roll up everything finished up to now - lag; returns how many jobs were counted."""
    state = await stats_repository.watermark(pool)
    if state["watermark"] is None:
        await stats_repository.init_watermark(pool, hour_floor(state["now"] - timedelta(seconds=keep_sec)))
    # Fixed for this call: now() moves on with every transaction, and chasing it would roll up
    # ever smaller windows forever.
    target = state["now"] - timedelta(seconds=lag_sec)
    counted = 0
    while stopping is None or not stopping.is_set():
        async with pool.acquire() as conn, conn.transaction():
            row = await stats_repository.lock_watermark(conn)
            low = row["watermark"]
            if low >= target:
                break
            started = time.perf_counter()
            # Nothing finished in [low, next): the window may start at `next` for free.
            following = await stats_repository.next_finished(conn, low, target)
            high = target if following is None else min(max(low, following) + MAX_WINDOW, target)
            if following is not None:
                counted += await stats_repository.rollup_window(conn, low, high, stats_rules.BOUNDS)
            await stats_repository.set_watermark(conn, high)
            metrics.STATS_ROLLUP_SECONDS.observe(time.perf_counter() - started)
        if high >= target:  # caught up: another transaction would only find that out
            break
    return counted


async def read_stats(pool: asyncpg.Pool, *, queue: str | None, start: datetime, end: datetime,
                     unrolled: bool = False) -> dict[str, Any]:
    """The report of retention/stats.build_report for hours in [start, end) (start floored to the hour).

    With `unrolled`, the finished counts also hold the jobs the rollup has not counted yet (finished
    from its watermark to `end`, read from dl_jobs; their run and wait times are not in the
    timings), read in the same snapshot as the rolled-up hours, so a rollup committing meanwhile
    neither hides nor doubles a job."""
    start = hour_floor(start)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        hourly = list(await stats_repository.read_hourly(conn, queue, start, end))
        hist = await stats_repository.read_hist(conn, queue, start, end)
        oldest = await stats_repository.oldest_waiting(conn, queue)
        state = await stats_repository.watermark(conn)
        if unrolled:
            low = max(state["watermark"] or start, start)
            hourly += [{**_NO_TIMES, "hour": row["hour"], "queue": row["queue"], "status": row["status"],
                        "jobs": row["jobs"]}
                       for row in await stats_repository.read_unrolled(conn, queue, low, end)]
    return stats_rules.build_report(hourly, hist, oldest, start=start, end=end, watermark=state["watermark"])


# An hourly row's timings for jobs counted without them (not rolled up yet).
_NO_TIMES = {"run_count": 0, "run_sum": 0.0, "run_max": None, "wait_count": 0, "wait_sum": 0.0, "wait_max": None}


async def read_errors(pool: asyncpg.Pool, *, queue: str | None, since: datetime, limit: int = 20) -> dict[str, Any]:
    """Failures grouped by error text in the hours from `since` (floored to the hour) on."""
    since = hour_floor(since)
    # one snapshot for the watermark and the groups, so a rollup committing between them neither
    # hides nor doubles a failure (as read_stats reads its unrolled part)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        state = await stats_repository.watermark(conn)
        tail_from = max(state["watermark"] or since, since)
        rows = await stats_repository.read_errors(conn, queue, since, limit, tail_from)
    return stats_rules.errors_report(rows, since=since)


class StatsRollup(PeriodicService):
    name = "stats_rollup"
    scope = Scope.LEADER

    settings: StatsSettings

    def __init__(self, pool: asyncpg.Pool, settings: StatsSettings | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None) -> None:
        super().__init__(settings or StatsSettings(), clock=clock, rng=rng)
        self.pool = pool
        self._exported_hour: datetime | None = None  # the hour the gauges were last computed in

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, settings: Settings) -> StatsRollup:
        return cls(pool, StatsSettings.from_settings(settings))

    def on_start(self) -> None:
        self._exported_hour = None  # the gauges are cleared when a run ends

    def on_stop(self) -> None:
        # Only the leader sets them: a node that stopped leading must not export stale numbers.
        for gauge in (metrics.STATS_LAST_HOUR_JOBS, metrics.STATS_LAST_HOUR_RUN_P95,
                      metrics.STATS_LAST_HOUR_WAIT_P95):
            gauge.clear()

    async def tick(self) -> int:
        counted = await rollup(self.pool, lag_sec=self.settings.lag_sec, keep_sec=self.settings.keep_sec,
                               stopping=self.stopping)
        # The hour is the service's clock's (model/clock.py: the system's, a ManualClock in a test), as
        # its ticks are: a test pins it inside an hour, or moves it across one, instead of depending
        # on when it runs. The database's hour agrees but for clock skew, which moves the
        # hour the gauges flip by that much, and reading it cost a round trip per tick.
        this_hour = hour_floor(self.clock.wall())
        # The pruned hours and the last complete hour move with the clock's hour; within one hour
        # only jobs this node rolled up can change the gauges (a rollup run by hand elsewhere shows
        # at the next hour or the next tick that counts jobs). An idle leader spends two round
        # trips a tick, not nine.
        if self._exported_hour == this_hour and not counted:
            return counted
        await stats_repository.prune_rollup(self.pool, this_hour - timedelta(seconds=self.settings.keep_sec))
        await self._export(this_hour)
        self._exported_hour = this_hour
        return counted

    async def _export(self, this_hour: datetime) -> None:
        """Gauges of the last complete hour."""
        report = await read_stats(self.pool, queue=None, start=this_hour - timedelta(hours=1), end=this_hour)
        for gauge in (metrics.STATS_LAST_HOUR_JOBS, metrics.STATS_LAST_HOUR_RUN_P95,
                      metrics.STATS_LAST_HOUR_WAIT_P95):
            gauge.clear()
        for entry in report["queues"]:
            for status, jobs in entry["finished"].items():
                metrics.STATS_LAST_HOUR_JOBS.labels(entry["queue"], status).set(jobs)
            if entry["run_sec"]["p95"] is not None:
                metrics.STATS_LAST_HOUR_RUN_P95.labels(entry["queue"]).set(entry["run_sec"]["p95"])
            if entry["wait_sec"]["p95"] is not None:
                metrics.STATS_LAST_HOUR_WAIT_P95.labels(entry["queue"]).set(entry["wait_sec"]["p95"])
