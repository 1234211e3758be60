"""Statements of recovery and bulk operations (issue 11): the queue-time check, and the tracked
operations with their batches. Statements in `queries/operations/`."""

from __future__ import annotations

import asyncpg

from dataloader.storage.queries import sql


class QueueTimeRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def flag_overdue(self, limits: dict[str, tuple[float, bool]], default_limit: float, default_fail: bool,
                           batch_size: int, lookback_sec: float | None) -> list[asyncpg.Record]:
        queues = sorted(limits)
        return await self.pool.fetch(
            sql("operations/flag_overdue"), queues, [limits[q][0] for q in queues], [limits[q][1] for q in queues],
            default_limit, default_fail, batch_size, lookback_sec)
