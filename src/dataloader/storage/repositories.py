"""SQL operations on the queue and its journal. All statements come from `queries/`.

`JobRepository` works on the pool (enqueue, read, cancel, reap). `AttemptConnection` wraps the one
connection a claimed attempt lives on: the advisory lock of its lock_key is a session lock, so
claim, heartbeat, progress, finish and unlock must all go through that same connection.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from dataloader.storage.queries import sql

FinishOutcome = Literal["succeeded", "canceled", "error", "release"]


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


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    job_id: uuid.UUID
    queue: str
    task: str
    args: dict[str, Any]
    lock_key: str
    partition_key: str
    lease_ttl_sec: int
    attempt: int
    max_attempts: int
    wait_sec: float
    locked: bool


@dataclass(frozen=True, slots=True)
class FinishResult:
    """status is None when the write was refused: the attempt had been fenced off."""

    status: str | None
    available_at: datetime | None
    woken_queues: int


class JobRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert_job(self, job: NewJob, request_id: str | None = None) -> tuple[asyncpg.Record, bool]:
        """Insert a job, or return the existing one with the same idempotency_key.

        Returns (row, created).
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
            existing = await conn.fetchrow(sql("get_job_by_idempotency_key"), job.idempotency_key)
        if existing is None:  # the conflicting row was deleted between the two statements
            return await self.insert_job(job, request_id)
        return existing, False

    async def insert_jobs(self, jobs: list[NewJob], producer: str | None = None) -> list[uuid.UUID]:
        """Insert many jobs in one statement; returns the ids of the rows actually inserted."""
        if not jobs:
            return []
        cols: list[list[Any]] = [[] for _ in range(11)]
        for job in jobs:
            values = (job.job_id or uuid.uuid4(), job.queue, job.task, job.args, job.idempotency_key,
                      job.lock_key, job.partition_key, job.priority, job.available_at,
                      job.max_attempts, job.lease_ttl_sec)
            for col, value in zip(cols, values, strict=True):
                col.append(value)
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


class AttemptConnection:
    """The statements of one attempt, on the connection that holds its advisory lock."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def claim(self, queue: str, worker: str) -> ClaimedJob | None:
        row = await self.conn.fetchrow(sql("claim_job"), queue, worker)
        if row is None:
            return None
        return ClaimedJob(
            job_id=row["job_id"], queue=row["queue"], task=row["task"], args=row["args"],
            lock_key=row["lock_key"], partition_key=row["partition_key"],
            lease_ttl_sec=row["lease_ttl_sec"], attempt=row["attempt"],
            max_attempts=row["max_attempts"], wait_sec=row["wait_sec"], locked=row["locked"],
        )

    async def heartbeat(self, job_id: uuid.UUID, attempt: int) -> bool | None:
        """Extend the lease. Returns cancel_requested, or None if the attempt was fenced off."""
        row = await self.conn.fetchrow(sql("heartbeat_job"), job_id, attempt)
        return None if row is None else row["cancel_requested"]

    async def set_progress(self, job_id: uuid.UUID, attempt: int, progress: dict[str, Any]) -> bool | None:
        """Store progress. Returns cancel_requested, or None if the attempt was fenced off."""
        row = await self.conn.fetchrow(sql("set_progress"), job_id, attempt, progress)
        return None if row is None else row["cancel_requested"]

    async def lock_holders(self, job_id: uuid.UUID, lock_key: str) -> tuple[int, bool]:
        """After a failed lock: (running jobs holding the key, whether the lock is ours now)."""
        row = await self.conn.fetchrow(sql("lock_holders"), job_id, lock_key)
        assert row is not None
        return row["running_holders"], row["locked_now"]

    async def relock(self, job_id: uuid.UUID, attempt: int, lock_key: str) -> bool | None:
        """Retake the lock after a reconnect. None: fenced off; False: someone else holds the key."""
        row = await self.conn.fetchrow(sql("relock_job"), job_id, attempt, lock_key)
        return None if row is None else row["locked"]

    async def finish(
        self,
        job_id: uuid.UUID,
        attempt: int,
        outcome: FinishOutcome,
        *,
        lock_key: str,
        unlock: bool,
        error: str | None = None,
        fatal: bool = False,
        max_attempts: int | None = None,
        delay_sec: float = 0.0,
        reason: str | None = None,
    ) -> FinishResult:
        row = await self.conn.fetchrow(
            sql("finish_job"), job_id, attempt, outcome, error, fatal, max_attempts, float(delay_sec),
            reason, lock_key, unlock,
        )
        assert row is not None
        return FinishResult(status=row["status"], available_at=row["available_at"],
                            woken_queues=row["woken"])
