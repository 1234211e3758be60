"""SQL of the node registry (`queries/nodes/*.sql`) and of observers (`queries/observers/*.sql`) on
the pool, returning typed values (`Node`, `Observer`) or plain rows for the runner."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from dataloader.model.observer import Node, Observer, ObserverSpec
from dataloader.storage.queries import sql


class NodeRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def register(self, node_id: uuid.UUID, name: str, host: str, pid: int, version: str, capacity: int,
                       queues: list[str], kinds: list[str], machine: str | None = None) -> asyncpg.Record:
        return await self.pool.fetchrow(sql("nodes/register_node"), node_id, name, host, pid, version, capacity,
                                        queues, kinds, machine)

    async def local_names(self, machine: str) -> list[asyncpg.Record]:
        """The nodes that may still run under the names of `machine`'s nodes (nodes/local_names.sql)."""
        return await self.pool.fetch(sql("nodes/local_names"), machine)

    async def declare_dead(self, node_ids: list[uuid.UUID]) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("nodes/declare_dead"), node_ids)

    async def heartbeat(self, node_id: uuid.UUID, dead_after_sec: float, kinds: list[str]) -> asyncpg.Record:
        return await self.pool.fetchrow(sql("nodes/heartbeat"), node_id, dead_after_sec, kinds)

    async def deregister(self, node_id: uuid.UUID) -> asyncpg.Record:
        return await self.pool.fetchrow(sql("nodes/deregister_node"), node_id)

    async def list(self, *, include_ended: bool = False, limit: int = 1000) -> list[Node]:
        rows = await self.pool.fetch(sql("nodes/list_nodes"), include_ended, limit)
        return [Node.from_row(r) for r in rows]


class ObserverRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(self, spec: ObserverSpec, max_restarts: int | None) -> Observer | None:
        """Create; None when a live observer has the name."""
        row = await self.pool.fetchrow(sql("observers/insert_observer"), spec.name, spec.kind, spec.args_json(),
                                       max_restarts)
        return None if row is None else Observer.from_row(row)

    async def get(self, name: str) -> Observer | None:
        row = await self.pool.fetchrow(sql("observers/get_observer"), name)
        return None if row is None else Observer.from_row(row)

    async def list(self, *, state: str | None = None, kind: str | None = None, node: str | None = None,
                   after: str | None = None, limit: int = 1000) -> list[Observer]:
        rows = await self.pool.fetch(sql("observers/list_observers"), state, kind, node, after, limit)
        return [Observer.from_row(r) for r in rows]

    async def stop(self, name: str) -> Observer | None:
        row = await self.pool.fetchrow(sql("observers/stop_observer"), name)
        return None if row is None else Observer.from_row(row)

    # -- the runner's statements (fenced on name, epoch and node) ----------------------------------

    async def claim(self, node_id: uuid.UUID, limit: int, kinds: list[str]) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("observers/claim_observers"), node_id, limit, kinds)

    async def finish_stopped(self, name: str, epoch: int, node_id: uuid.UUID) -> bool:
        return await self.pool.fetchrow(sql("observers/finish_stopped"), name, epoch, node_id) is not None

    async def crashed(self, name: str, epoch: int, node_id: uuid.UUID, error: str, delay_sec: float,
                      failures: int, give_up: bool) -> Any:
        return await self.pool.fetchrow(sql("observers/crashed"), name, epoch, node_id, error, delay_sec,
                                        failures, give_up)

    async def save(self, name: str, epoch: int, checkpoint: str | None, status: str | None) -> bool:
        return await self.pool.fetchrow(sql("observers/save_observer"), name, epoch, checkpoint, status) is not None
