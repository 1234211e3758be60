"""Bulk operations over several shards (docs/scaling.md "Past one primary"): an operation changes
jobs in one database, so it lives on the shard of the queues its filter names, where that shard's
runner (on the nodes serving its queues) works it. A filter naming no queue acts on the default
shard; one naming queues of two shards is refused. Reads and state changes by id ask every shard."""

from __future__ import annotations

import asyncio
import heapq
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from dataloader.exceptions import InvalidJobRequest, OperationNotFound, ValidationFailed
from dataloader.jobs.manager import decode_cursor, encode_cursor
from dataloader.jobs.shards import first_found
from dataloader.model.job_filter import JobFilter
from dataloader.operations.manager import (
    MAX_OPERATIONS_LIMIT,
    PROCESS_KINDS,
    DryRun,
    Operation,
    OperationEvent,
    OperationManager,
)
from dataloader.storage.audit_repository import audited_as


class ShardedOperationManager:
    def __init__(self, managers: Mapping[str, OperationManager], shard_of: Callable[[str], str]) -> None:
        self.managers = dict(managers)
        self.shard_of = shard_of
        self.default = next(iter(self.managers))

    def _shard_of_filter(self, kind: str, filter: JobFilter | Mapping[str, Any] | None) -> str:
        if kind in PROCESS_KINDS or filter is None:
            return self.default  # processes live on the default shard
        queues = filter.queues if isinstance(filter, JobFilter) else (filter.get("queues") if isinstance(
            filter, Mapping) else None)
        if not queues or not isinstance(queues, list | tuple):
            return self.default
        shards = sorted({self.shard_of(q) for q in queues if isinstance(q, str)})
        if len(shards) > 1:
            message = f"names queues of shards {', '.join(shards)}: one operation acts on one shard"
            raise ValidationFailed(f"filter queues: {message}",
                                   [{"loc": ["filter", "queues"], "msg": message, "type": "value_error"}])
        return shards[0] if shards else self.default

    async def start(self, kind: str, filter: JobFilter | Mapping[str, Any] | None, **options: Any
                    ) -> Operation | DryRun:
        return await self.managers[self._shard_of_filter(kind, filter)].start(kind, filter, **options)

    def _ask(self, call: Callable[[OperationManager], Any]) -> Any:
        return first_found(list(self.managers), lambda s: call(self.managers[s]), OperationNotFound)

    async def get(self, operation_id: uuid.UUID) -> Operation:
        return await self._ask(lambda m: m.get(operation_id))

    async def events(self, operation_id: uuid.UUID) -> list[OperationEvent]:
        return await self._ask(lambda m: m.events(operation_id))

    # One audit row for the shard that has the operation, not a refusal from each shard asked before it.
    async def pause(self, operation_id: uuid.UUID, **options: Any) -> Operation:
        async with audited_as(self.managers[self.default].repo, "operation.pause", "operation", operation_id):
            return await self._ask(lambda m: m.pause(operation_id, **options))

    async def resume(self, operation_id: uuid.UUID, **options: Any) -> Operation:
        async with audited_as(self.managers[self.default].repo, "operation.resume", "operation", operation_id):
            return await self._ask(lambda m: m.resume(operation_id, **options))

    async def cancel(self, operation_id: uuid.UUID, **options: Any) -> Operation:
        async with audited_as(self.managers[self.default].repo, "operation.cancel", "operation", operation_id):
            return await self._ask(lambda m: m.cancel(operation_id, **options))

    async def wait(self, operation_id: uuid.UUID, **options: Any) -> Operation:
        async def holder(shard: str) -> str:
            await self.managers[shard].get(operation_id)
            return shard
        shard = await first_found(list(self.managers), holder, OperationNotFound)
        return await self.managers[shard].wait(operation_id, **options)

    async def list(self, *, states: list[str] | None = None, cursor: str | None = None, limit: int = 50
                   ) -> tuple[list[Operation], str | None]:
        if not 1 <= limit <= MAX_OPERATIONS_LIMIT:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_OPERATIONS_LIMIT}")
        if cursor:
            decode_cursor(cursor)
        pages = await asyncio.gather(*(m.list(states=states, cursor=cursor, limit=limit)
                                       for m in self.managers.values()))
        merged = list(heapq.merge(*(ops for ops, _ in pages), key=lambda o: (o.created_at, o.id), reverse=True))
        if len(merged) > limit or (len(merged) == limit and any(c for _, c in pages)):
            merged = merged[:limit]
            return merged, encode_cursor(merged[-1].created_at, merged[-1].id)
        return merged, None

