"""Statements of the stats rollup and its reports (retention/rollup.py): the watermark, the
hourly rollup in one transaction per window, the reads of the rolled-up hours and the rollup's
own retention. Statements in `queries/stats/`. `conn` is a pool or a connection (the rollup's
window runs its statements on one connection, in one transaction)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.storage.queries import sql

Runner = Any  # an asyncpg pool, or a connection acquired from it (its proxy)


async def watermark(conn: Runner) -> asyncpg.Record:
    """(watermark, now): the time up to which finished jobs are rolled up (None: never yet)."""
    return await conn.fetchrow(sql("stats/watermark"))


async def init_watermark(conn: Runner, at: datetime) -> None:
    """Create the watermark at `at` on first use (a no-op once it exists)."""
    await conn.execute(sql("stats/init_watermark"), at)


async def lock_watermark(conn: asyncpg.Connection) -> asyncpg.Record:
    """(watermark, now), the watermark row locked for `conn`'s transaction."""
    return await conn.fetchrow(sql("stats/lock_watermark"))


async def next_finished(conn: Runner, low: datetime, high: datetime) -> datetime | None:
    """The earliest finished_at in [low, high) (None: none)."""
    return await conn.fetchval(sql("stats/next_finished"), low, high)


async def rollup_window(conn: asyncpg.Connection, low: datetime, high: datetime, bounds: Sequence[float]) -> int:
    """Roll up the jobs finished in [low, high); how many were counted."""
    return await conn.fetchval(sql("stats/rollup"), low, high, list(bounds))


async def set_watermark(conn: asyncpg.Connection, at: datetime) -> None:
    await conn.execute(sql("stats/set_watermark"), at)


async def read_hourly(conn: Runner, queue: str | None, start: datetime, end: datetime) -> list[asyncpg.Record]:
    return await conn.fetch(sql("stats/read_hourly"), queue, start, end)


async def read_hist(conn: Runner, queue: str | None, start: datetime, end: datetime) -> list[asyncpg.Record]:
    return await conn.fetch(sql("stats/read_hist"), queue, start, end)


async def read_unrolled(conn: Runner, queue: str | None, low: datetime, high: datetime) -> list[asyncpg.Record]:
    """Jobs finished in [low, high) by queue, hour and status, from dl_jobs (not the rollup)."""
    return await conn.fetch(sql("stats/read_unrolled"), low, high, queue)


async def oldest_waiting(conn: Runner, queue: str | None) -> list[asyncpg.Record]:
    return await conn.fetch(sql("stats/oldest_waiting"), queue)


async def read_errors(conn: Runner, queue: str | None, since: datetime, limit: int,
                      tail_from: datetime) -> list[asyncpg.Record]:
    """The error groups from `since`: the rolled-up hours and, from `tail_from` (the watermark read
    in the same snapshot, or `since` when later), the failures not rolled up yet."""
    return await conn.fetch(sql("stats/read_errors"), queue, since, limit, tail_from)


async def prune_rollup(conn: Runner, before: datetime) -> int:
    """Drop the rollup's rows of hours before `before`; how many hourly rows."""
    return await conn.fetchval(sql("stats/prune_rollup"), before)
