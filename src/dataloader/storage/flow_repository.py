"""SQL of flow control (`queries/flow/*.sql`) on the pool, returning `QueueFlow` values. The rule
that enforces a pause is not here: it is one `NOT EXISTS` in the claim (claim_jobs.sql)."""

from __future__ import annotations

import asyncpg

from dataloader.model.flow import QueueFlow
from dataloader.storage.queries import sql


class FlowRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def pause(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/pause_queue"), queue)
        return await self._with_use(QueueFlow(queue=row["queue"], paused=row["paused"], paused_at=row["paused_at"]))

    async def resume(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/resume_queue"), queue)
        if row is None:  # never paused: nothing to change, nothing to wake
            return await self._with_use(QueueFlow(queue=queue, paused=False))
        return await self._with_use(QueueFlow(queue=row["queue"], paused=row["paused"], paused_at=row["paused_at"]))

    async def _with_use(self, flow: QueueFlow) -> QueueFlow:
        """The state a change left the queue in, with its current use (read after the change)."""
        use = await self.pool.fetchrow(sql("flow/queue_use"), flow.queue)
        return QueueFlow(queue=flow.queue, paused=flow.paused, paused_at=flow.paused_at, running=use["running"],
                         queued=use["queued"])

    async def list(self) -> list[QueueFlow]:
        rows = await self.pool.fetch(sql("flow/list_queues"))
        return [QueueFlow(queue=r["queue"], paused=r["paused"], paused_at=r["paused_at"], running=r["running"],
                          queued=r["queued"]) for r in rows]

    async def paused_states(self) -> dict[str, bool]:
        """Every queue with flow state: paused or not."""
        return {r["queue"]: r["paused"] for r in await self.pool.fetch(sql("flow/paused_queues"))}
