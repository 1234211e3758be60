"""SQL of flow control (`queries/flow/*.sql`) on the pool, returning `QueueFlow` values. The rules
that enforce a pause and the limits are not here: they are in the claim (claim_jobs.sql,
claim_limited_jobs.sql)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import asyncpg

from dataloader.model.flow import QueueFlow, QueueSettings, TaskFlow, TaskSettings, held_back
from dataloader.storage.queries import sql


def _flow(row: Mapping[str, Any], running: int = 0, queued: int = 0, paused_tasks: dict[str, Any] | None = None
          ) -> QueueFlow:
    return QueueFlow(queue=row["queue"], paused=row["paused"], paused_at=row["paused_at"], running=running,
                     queued=queued, settings=QueueSettings.from_row(row), settings_source=row["settings_source"],
                     paused_tasks=paused_tasks or {})


class FlowRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def pause(self, queue: str) -> QueueFlow:
        return await self._with_use(_flow(await self.pool.fetchrow(sql("flow/pause_queue"), queue)))

    async def resume(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/resume_queue"), queue)
        if row is None:  # no flow state: nothing to change, nothing to wake
            return await self._with_use(QueueFlow(queue=queue, paused=False))
        return await self._with_use(_flow(row))

    async def configure(self, queue: str, merge: Callable[[QueueSettings], QueueSettings]) -> QueueFlow:
        """Lock the queue's row, merge a change into its settings (`merge` may raise: nothing is
        written then) and write them back as a runtime setting, in one transaction."""
        async with self.pool.acquire() as conn, conn.transaction():
            current = QueueSettings.from_row(await conn.fetchrow(sql("flow/lock_queue_settings"), queue))
            new = merge(current)
            await conn.fetchval(sql("flow/set_queue_settings"), queue, new.concurrency, new.partition_concurrency,
                                new.rate_limit, new.rate_period_sec, new.partition_rate_limit,
                                new.partition_rate_period_sec, new.fair_share, new.fair_weights)
        return await self.get(queue)

    async def configure_task(self, queue: str, task: str, merge: Callable[[TaskSettings], TaskSettings]
                             ) -> QueueFlow:
        """Lock the queue's row, then the task's (the gate's order), merge a change into the task's
        limits (`merge` may raise: nothing is written then), write them back as a runtime setting
        and the queue's task_limited flag, in one transaction; wakes the queue's workers."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.fetchrow(sql("flow/lock_queue_settings"), queue)
            new = merge(TaskSettings.from_row(await conn.fetchrow(sql("flow/lock_task_settings"), queue, task)))
            await conn.execute(sql("flow/set_task_settings"), queue, task, new.concurrency, new.rate_limit,
                               new.rate_period_sec)
            await conn.fetchrow(sql("flow/task_limited"), queue)
        return await self.get(queue)

    async def declare_task(self, queue: str, task: str, settings: TaskSettings) -> bool:
        """Apply a task's declared limits in `queue` unless set at run time; whether anything changed."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.fetchrow(sql("flow/lock_queue_settings"), queue)
            applied = await conn.fetchval(sql("flow/declare_task_settings"), queue, task, settings.concurrency,
                                          settings.rate_limit, settings.rate_period_sec)
            if applied:
                await conn.fetchrow(sql("flow/task_limited"), queue)
        return bool(applied)

    async def task_limits(self, queue: str | None = None) -> dict[str, dict[str, TaskFlow]]:
        """The tasks with limits of their own and their use now: queue -> task -> TaskFlow."""
        result: dict[str, dict[str, TaskFlow]] = {}
        for r in await self.pool.fetch(sql("flow/task_limit_use"), queue):
            result.setdefault(r["queue"], {})[r["task"]] = TaskFlow(
                task=r["task"], settings=TaskSettings.from_row(r), settings_source=r["settings_source"],
                running=r["running"], runnable=r["runnable"], starts=r["starts"])
        return result

    async def declare(self, queue: str, settings: QueueSettings) -> bool:
        """Apply declared settings unless a runtime setting is in place; whether anything changed."""
        s = settings
        return await self.pool.fetchval(sql("flow/declare_queue_settings"), queue, s.concurrency,
                                        s.partition_concurrency, s.rate_limit, s.rate_period_sec,
                                        s.partition_rate_limit, s.partition_rate_period_sec, s.fair_share,
                                        s.fair_weights)

    async def get(self, queue: str) -> QueueFlow:
        row = await self.pool.fetchrow(sql("flow/queue_row"), queue)
        return await self._with_use(_flow(row) if row is not None else QueueFlow(queue=queue, paused=False))

    async def _with_use(self, flow: QueueFlow) -> QueueFlow:
        """The state a change left the queue in, with its current use (read after the change)."""
        use = await self.pool.fetchrow(sql("flow/queue_use"), flow.queue)
        tasks = await self.paused_tasks()
        return await self._with_held_back(QueueFlow(
            queue=flow.queue, paused=flow.paused, paused_at=flow.paused_at, running=use["running"],
            queued=use["queued"], settings=flow.settings, settings_source=flow.settings_source,
            paused_tasks={task: at for (q, task), (paused, at) in tasks.items() if q == flow.queue and paused},
            task_limits=(await self.task_limits(flow.queue)).get(flow.queue, {})))

    async def pause_task(self, queue: str, task: str) -> QueueFlow:
        await self.pool.fetchrow(sql("flow/pause_task"), queue, task)
        return await self.get(queue)

    async def resume_task(self, queue: str, task: str) -> QueueFlow:
        await self.pool.fetchrow(sql("flow/resume_task"), queue, task)
        return await self.get(queue)

    async def _with_held_back(self, flow: QueueFlow) -> QueueFlow:
        """`flow` with what each of its limits holds back now (a queue with no limit: nothing)."""
        if not flow.settings.limited:
            return flow
        use = await self.limit_use(flow.queue)
        return replace(flow, held_back=held_back(flow.settings, **use))

    async def limit_use(self, queue: str) -> dict[str, int]:
        """The current use of a queue's limits (flow/limit_use.sql), as held_back's keywords."""
        row = await self.pool.fetchrow(sql("flow/limit_use"), queue)
        return {k: row[k] for k in ("running", "runnable", "starts", "partition_concurrency_held",
                                    "partition_rate_held")}

    async def list(self) -> list[QueueFlow]:
        rows = await self.pool.fetch(sql("flow/list_queues"))
        task_limits = await self.task_limits()
        flows = [_flow(r, r["running"], r["queued"], dict(zip(r["paused_tasks"], r["tasks_paused_at"], strict=True)))
                 for r in rows]
        return [await self._with_held_back(replace(f, task_limits=task_limits.get(f.queue, {}))) for f in flows]

    async def paused_states(self) -> dict[str, bool]:
        """Every queue with flow state: paused or not."""
        return {r["queue"]: r["paused"] for r in await self.pool.fetch(sql("flow/paused_queues"))}

    async def paused_tasks(self) -> dict[tuple[str, str], tuple[bool, Any]]:
        """Every task with flow state (0025): (queue, task) -> (paused, paused_at)."""
        return {(r["queue"], r["task"]): (r["paused"], r["paused_at"])
                for r in await self.pool.fetch(sql("flow/paused_tasks"))}

    async def scaling_inputs(self, queue: str | None, window_sec: float) -> list[asyncpg.Record]:
        """The autoscaling signal's inputs (flow/scaling_inputs.sql), for `queue` or every queue."""
        return await self.pool.fetch(sql("flow/scaling_inputs"), queue, window_sec)
