"""SQL of flow control (`queries/flow/*.sql`) on the pool, returning `QueueFlow` values. The rule
that enforces a pause is not here: it is one `NOT EXISTS` in the claim (claim_jobs.sql)."""

from __future__ import annotations

from typing import Any

import asyncpg

from dataloader.model.flow import QueueFlow
from dataloader.storage.queries import sql


class FlowRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def pause(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/pause_queue"), queue)
        return await self._with_use(_flow(row))

    async def resume(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/resume_queue"), queue)
        if row is None:  # never paused: nothing to change, nothing to wake
            return await self._with_use(QueueFlow(queue=queue, paused=False))
        return await self._with_use(_flow(row))

    async def pause_task(self, queue: str, task: str) -> QueueFlow:
        await self.pool.fetchrow(sql("flow/pause_task"), queue, task)
        return await self.state(queue)

    async def resume_task(self, queue: str, task: str) -> QueueFlow:
        await self.pool.fetchrow(sql("flow/resume_task"), queue, task)
        return await self.state(queue)

    async def state(self, queue: str) -> QueueFlow:
        """One queue as the listing shows it (an operator read after a change)."""
        for flow in await self.list():
            if flow.queue == queue:
                return flow
        return QueueFlow(queue=queue, paused=False)

    async def set_fair_share(self, queue: str, fair_share: bool | None, weights: dict[str, float] | None,
                             set_weights: bool) -> QueueFlow:
        """Fair share on or off (None: unchanged) and, when `set_weights`, the weights (0024)."""
        row = await self.pool.fetchrow(sql("flow/set_fair_share"), queue, fair_share, weights, set_weights)
        return await self._with_use(_flow(row))

    async def _with_use(self, flow: QueueFlow) -> QueueFlow:
        """The state a change left the queue in, with its current use (read after the change)."""
        use = await self.pool.fetchrow(sql("flow/queue_use"), flow.queue)
        tasks = await self.paused_tasks()
        return QueueFlow(queue=flow.queue, paused=flow.paused, paused_at=flow.paused_at, running=use["running"],
                         queued=use["queued"], fair_share=flow.fair_share, fair_weights=flow.fair_weights,
                         paused_tasks={task: at for (q, task), (paused, at) in tasks.items()
                                       if q == flow.queue and paused})

    async def list(self) -> list[QueueFlow]:
        rows = await self.pool.fetch(sql("flow/list_queues"))
        return [_flow(r, running=r["running"], queued=r["queued"],
                      paused_tasks=dict(zip(r["paused_tasks"], r["tasks_paused_at"], strict=True))) for r in rows]

    async def paused_states(self) -> dict[str, bool]:
        """Every queue with flow state: paused or not."""
        return {r["queue"]: r["paused"] for r in await self.pool.fetch(sql("flow/paused_queues"))}

    async def paused_tasks(self) -> dict[tuple[str, str], tuple[bool, Any]]:
        """Every task with flow state: (queue, task) -> (paused, paused_at)."""
        return {(r["queue"], r["task"]): (r["paused"], r["paused_at"])
                for r in await self.pool.fetch(sql("flow/paused_tasks"))}


def _weights(value: Any) -> dict[str, float] | None:
    """fair_weights as stored; a hand-written value that is not an object reads as none (the claim
    reads it the same way: every key weighs 1)."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else None


def _flow(row: asyncpg.Record, running: int = 0, queued: int = 0, paused_tasks: dict[str, Any] | None = None
          ) -> QueueFlow:
    return QueueFlow(queue=row["queue"], paused=row["paused"], paused_at=row["paused_at"], running=running,
                     queued=queued, fair_share=row["fair_share"], fair_weights=_weights(row["fair_weights"]),
                     paused_tasks=paused_tasks or {})
