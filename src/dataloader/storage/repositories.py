"""SQL operations on the queue and its journal that run on the pool (enqueue, read, cancel, reap,
progress). All statements come from `queries/`. The statements of a queue worker's control
connection are in `queue_connection.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.storage.queries import sql


@dataclass(frozen=True, slots=True)
class NewJob:
    queue: str
    task: str
    lock_key: str
    args: dict[str, Any]
    idempotency_key: str | None = None
    partition_key: str = ""
    priority: int = 100
    available_at: datetime | None = None
    max_attempts: int = 5
    lease_ttl_sec: int = 60
    producer: str | None = None
    job_id: uuid.UUID | None = None


class JobRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert_job(self, job: NewJob, request_id: str | None = None) -> tuple[asyncpg.Record, bool]:
        """Insert a job, or return the existing one with the same idempotency_key.

        Returns (row, created); an existing row also carries `same_args` (jsonb equality with
        `job.args`).
        """
        job_id = job.job_id or uuid.uuid4()
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                sql("insert_job"), job_id, job.queue, job.task, job.args, job.idempotency_key,
                job.lock_key, job.partition_key, job.priority, job.available_at, job.max_attempts,
                job.lease_ttl_sec, job.producer, request_id,
            )
            if row is not None:
                return row, True
            existing = await conn.fetchrow(sql("get_job_by_idempotency_key"), job.idempotency_key, job.args)
        if existing is None:  # the conflicting row was deleted between the two statements
            return await self.insert_job(job, request_id)
        return existing, False

    async def insert_jobs(self, jobs: list[NewJob], producer: str | None = None) -> list[uuid.UUID]:
        """Insert many jobs in one statement; returns the ids of the rows actually inserted, in
        input order (a job without job_id gets one from the database)."""
        if not jobs:
            return []
        cols = list(zip(*((j.job_id, j.queue, j.task, j.args, j.idempotency_key, j.lock_key, j.partition_key,
                           j.priority, j.available_at, j.max_attempts, j.lease_ttl_sec) for j in jobs),
                        strict=True))
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql("insert_jobs_batch"), *cols, producer)
        return [row["job_id"] for row in rows]

    async def get_job(self, job_id: uuid.UUID) -> asyncpg.Record | None:
        return await self.pool.fetchrow(sql("get_job"), job_id)

    async def cancel_job(self, job_id: uuid.UUID, request_id: str | None = None) -> str | None:
        """Request cancellation. Returns the status before the call, or None if no such job."""
        row = await self.pool.fetchrow(sql("cancel_job"), job_id, request_id)
        return None if row is None else row["previous_status"]

    async def list_events(self, job_id: uuid.UUID, after_event_id: int = 0, limit: int = 1000
                          ) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("list_job_events"), job_id, after_event_id, limit)

    async def reap_expired(self, batch_size: int = 1000) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("reap_expired"), batch_size)

    async def set_progress(self, job_id: uuid.UUID, attempt: int, progress: dict[str, Any]) -> bool | None:
        """Store progress. Returns cancel_requested, or None if the attempt was fenced off."""
        row = await self.pool.fetchrow(sql("set_progress"), job_id, attempt, progress)
        return None if row is None else row["cancel_requested"]

    async def queue_stats(self) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("queue_stats"))

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        statuses: list[str] | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        before: tuple[datetime, uuid.UUID] | None = None,
        limit: int = 100,
    ) -> list[asyncpg.Record]:
        """Jobs newest first; `before` is the (created_at, job_id) of the previous page's last row."""
        before_at, before_id = before if before is not None else (None, None)
        return await self.pool.fetch(
            sql("list_jobs"), queue, task, statuses or None, created_from, created_to,
            before_at, before_id, limit,
        )

    async def schema_revision(self) -> str | None:
        """The migration revision of the database, or None when it was never migrated."""
        try:
            return await self.pool.fetchval(sql("schema_revision"))
        except asyncpg.exceptions.UndefinedTableError:
            return None
