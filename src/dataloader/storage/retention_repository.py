"""Statements of the retention pruner (retention/pruner.py): which queues have finished jobs, and
the batched deletes of old finished jobs and of the processes' event feed. Statements in
`queries/retention/`."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence

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
