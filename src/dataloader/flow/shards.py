"""Flow control over several shards (docs/scaling.md "Past one primary"): a queue's pause and
limits live in the database of its shard, next to its jobs and the claims that read them, so a
change goes to that shard; the lists merge every shard's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from dataloader import metrics
from dataloader.flow.manager import DEFAULT_TARGET_SEC, FlowManager, check_queue_name
from dataloader.model.flow import QueueFlow, QueueScaling, QueueSettings, TaskSettings


class ShardedFlowManager:
    """FlowManager's interface, routed by queue (the default shard first)."""

    def __init__(self, managers: Mapping[str, FlowManager], shard_of: Callable[[str], str]) -> None:
        self.managers = dict(managers)
        self.shard_of = shard_of

    def _for(self, queue: str) -> FlowManager:
        return self.managers[self.shard_of(check_queue_name(queue))]

    async def pause(self, queue: str, task: str | None = None) -> QueueFlow:
        return await self._for(queue).pause(queue, task)

    async def resume(self, queue: str, task: str | None = None) -> QueueFlow:
        return await self._for(queue).resume(queue, task)

    async def configure(self, queue: str, changes: Mapping[str, Any]) -> QueueFlow:
        return await self._for(queue).configure(queue, changes)

    async def configure_task(self, queue: str, task: str, changes: Mapping[str, Any]) -> QueueFlow:
        return await self._for(queue).configure_task(queue, task, changes)

    async def apply_declared_tasks(self, declared: Mapping[tuple[str, str], TaskSettings]) -> None:
        for (queue, task), settings in declared.items():
            await self._for(queue).apply_declared_tasks({(queue, task): settings})

    async def apply_declared(self, declared: Mapping[str, QueueSettings]) -> None:
        for queue, settings in declared.items():
            await self._for(queue).apply_declared({queue: settings})

    async def list(self) -> list[QueueFlow]:
        answers = await asyncio.gather(*(m.list() for m in self.managers.values()))
        return sorted((flow for flows in answers for flow in flows), key=lambda f: f.queue)

    async def scaling(self, queue: str | None = None, target_sec: float = DEFAULT_TARGET_SEC) -> list[QueueScaling]:
        if queue is not None:
            return await self._for(queue).scaling(queue, target_sec)
        answers = await asyncio.gather(*(m.scaling(None, target_sec) for m in self.managers.values()))
        return sorted((s for rows in answers for s in rows), key=lambda s: s.queue)

    async def refresh_metrics(self) -> None:
        for gauge in (metrics.QUEUE_PAUSED, metrics.QUEUE_DESIRED_WORKERS, metrics.TASK_PAUSED,
                      metrics.FLOW_LIMIT, metrics.FLOW_IN_USE, metrics.FLOW_HELD_BACK_NOW,
                      metrics.TASK_LIMIT, metrics.TASK_IN_USE, metrics.TASK_HELD_BACK_NOW):
            gauge.clear()
        for manager in self.managers.values():
            await manager.refresh_metrics(clear=False)
