"""Statements of the retention pruner (retention/pruner.py): which queues have finished jobs, and
the batched deletes of old finished jobs and of the processes' event feed, and the journal's
partitions (their list, the one created ahead, the one dropped with its survivors kept). Statements in
`queries/retention/`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime

import asyncpg

from dataloader.storage.queries import sql


async def finished_queues(pool: asyncpg.Pool) -> list[str]:
    """The queues with finished jobs (a loose index scan)."""
    return [row["queue"] for row in await pool.fetch(sql("retention/finished_queues"))]


async def count_prunable(pool: asyncpg.Pool, queue: str, status: str, older_than_sec: float) -> int:
    """How many jobs a prune of (queue, status) past `older_than_sec` would delete (the dry run)."""
    return await pool.fetchval(sql("retention/count_prunable"), queue, status, older_than_sec)


async def prune_batch(pool: asyncpg.Pool, queue: str, status: str, older_than_sec: float, batch_size: int) -> int:
    """Delete at most `batch_size` such jobs (their journal with them); how many were deleted."""
    return await pool.fetchval(sql("retention/prune_batch"), queue, status, older_than_sec, batch_size)


async def prune_batch_archived(pool: asyncpg.Pool, queue: str, status: str, older_than_sec: float, batch_size: int,
                               export: Callable[[Sequence[asyncpg.Record], Sequence[asyncpg.Record]], Awaitable[None]]
                               ) -> int:
    """prune_batch with an export before the delete, in one transaction: lock and read at most
    `batch_size` such jobs and their journal, await `export(jobs, events)`, then delete exactly those
    jobs and commit. If `export` raises, the transaction rolls back and nothing is deleted (the
    error propagates). The row locks are held while `export` runs: only finished rows, which no
    claim, heartbeat or finish touches."""
    async with pool.acquire() as conn, conn.transaction():
        jobs = await conn.fetch(sql("retention/archive_batch_jobs"), queue, status, older_than_sec, batch_size)
        if not jobs:
            return 0
        ids: list[uuid.UUID] = [row["job_id"] for row in jobs]
        events = await conn.fetch(sql("retention/archive_batch_events"), ids)
        await export(jobs, events)
        return await conn.fetchval(sql("retention/delete_archived_jobs"), ids)


async def prune_fair_tenants_batch(pool: asyncpg.Pool, idle_sec: float, batch_size: int) -> int:
    """Delete one batch of fair share's rows of tenants idle for `idle_sec`; how many rows."""
    return await pool.fetchval(sql("retention/prune_fair_tenants_batch"), idle_sec, batch_size)


async def prune_feed_batch(pool: asyncpg.Pool, older_than_sec: float, batch_size: int) -> int:
    """Delete one batch from the head of the processes' event feed; how many rows."""
    return await pool.fetchval(sql("retention/prune_feed_batch"), older_than_sec, batch_size)


# -- the journal's partitions (retention/partitions.py, migration 0039) --------------------------

async def journal_partitions(pool: asyncpg.Pool | asyncpg.Connection) -> list[asyncpg.Record]:
    """The journal's partitions from the catalog: name, range_from, range_to, is_default,
    rows_estimate, bytes; empty when the journal is not partitioned."""
    return list(await pool.fetch(sql("retention/journal_partitions")))


async def _in_a_gap(conn: asyncpg.Connection, take: Callable[[], Awaitable[object]], attempts: int,
                   pause_sec: float) -> None:
    """Run `take` (NOWAIT lock statements) in a savepoint, again after `pause_sec` when a lock is
    held by someone else, at most `attempts` times; LockNotAvailableError after that. The
    caller's transaction (what it staged before) survives a failed attempt."""
    for attempt in range(attempts):
        try:
            async with conn.transaction():  # a savepoint
                await take()
            return
        except asyncpg.LockNotAvailableError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(pause_sec)


async def attach_journal_partition(pool: asyncpg.Pool, name: str, start: datetime, end: datetime,
                                   lock_timeout: str, *, attempts: int = 20, pause_sec: float = 0.05) -> bool:
    """Create and attach the partition `name` for [start, end); False when it exists.
    LockNotAvailableError when no gap between writers came in `attempts` tries."""
    async with pool.acquire() as conn, conn.transaction():
        async def take() -> None:
            await conn.execute(sql("retention/journal_lock_for_attach"))
            await conn.execute(sql("retention/journal_lock_default"))

        await conn.execute(sql("retention/journal_lock_timeout"), lock_timeout)
        await _in_a_gap(conn, take, attempts, pause_sec)
        return bool(await conn.fetchval(sql("retention/journal_attach_partition"), name, start, end))


async def drop_journal_partition(pool: asyncpg.Pool, name: str, start: datetime | None, end: datetime,
                                 rules: tuple[list[str], list[float], list[str], list[str], list[float], float],
                                 lock_timeout: str, *, attempts: int = 20, pause_sec: float = 0.05) -> tuple[int, int]:
    """Drop the partition `name` ([start, end)) in one transaction, keeping the rows of the jobs
    the policy keeps (`rules`: journal_expired.sql's $1-$6): lock the expired jobs that could come
    back, stage the survivors (the one read of the partition, before any table lock), then take
    the journal's lock in a gap between writers, drop and put them back. Returns (rows staged,
    rows kept)."""
    statuses, ages, queues, queue_statuses, queue_ages, floor = rules
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(sql("retention/journal_lock_timeout"), lock_timeout)
        await conn.fetchval(sql("retention/journal_lock_expired"), statuses, ages, queues, queue_statuses, queue_ages,
                            floor, name, start, end)
        await conn.execute(sql("retention/journal_stage_table"))
        staged = await conn.fetchval(sql("retention/journal_stage_survivors"), statuses, ages, queues,
                                     queue_statuses, queue_ages, floor, name, start, end)
        await _in_a_gap(conn, lambda: conn.execute(sql("retention/journal_lock_for_drop")), attempts, pause_sec)
        kept = await conn.fetchval(sql("retention/journal_drop_partition"), name)
        return int(staged), int(kept)


async def drop_empty_journal_partition(pool: asyncpg.Pool, name: str, lock_timeout: str, *, attempts: int = 20,
                                       pause_sec: float = 0.05) -> bool:
    """Drop the partition `name` if it holds no row (False, and nothing changed, if it holds one):
    looked at first without a table lock, then again under the journal's lock, taken in a gap
    between writers as a drop with rows takes it. No row is staged: there is none to keep."""
    async with pool.acquire() as conn:
        probe = await conn.fetchval(sql("retention/journal_partition_probe"), name)
        if probe is None or not await conn.fetchval(probe):
            return False
        async with conn.transaction():
            await conn.execute(sql("retention/journal_lock_timeout"), lock_timeout)
            await _in_a_gap(conn, lambda: conn.execute(sql("retention/journal_lock_for_drop")), attempts, pause_sec)
            if not await conn.fetchval(probe):
                return False
            await conn.execute(sql("retention/journal_stage_table"))  # empty: dl_journal_drop_partition reads it
            await conn.fetchval(sql("retention/journal_drop_partition"), name)
            return True


async def journal_partition_rows(pool: asyncpg.Pool, name: str, start: datetime | None, end: datetime,
                                 prefetch: int = 2000) -> AsyncIterator[asyncpg.Record]:
    """journal_partition_rows.sql through a cursor in a read-only transaction of its own: the rows
    of one partition, `prefetch` at a time."""
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        async for row in conn.cursor(sql("retention/journal_partition_rows"), name, start, end, prefetch=prefetch):
            yield row

