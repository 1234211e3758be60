"""SQL operations on the queue and its journal. All statements come from `queries/`.

`JobRepository` works on the pool (enqueue, read, cancel, reap, progress). `QueueConnection` wraps
a queue worker's control connection: the advisory lock of a job's lock_key is a session lock, so
the claim that takes it, the heartbeats and the finish that releases it all go through that same
connection, in batches.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
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
    lock_hash: int
    request_id: str | None = None

    @property
    def locked(self) -> bool:
        """Always true: the claim only marks a job running once its lock_key's lock is granted."""
        return True


@dataclass(frozen=True, slots=True)
class SkippedCandidate:
    """A runnable job the claim looked at but left queued and untouched. `lock_busy`: its
    lock_key's advisory lock is held by another session (a claim racing ours, or a stray holder);
    otherwise an earlier job of the same key in the batch asked for the lock instead."""

    job_id: uuid.UUID
    queue: str
    task: str
    lock_key: str
    lock_hash: int
    lock_busy: bool


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim statement did. `candidates` counts every runnable job it looked at: fewer
    than asked for means the queue had no more runnable jobs at that moment."""

    claimed: list[ClaimedJob]
    skipped: list[SkippedCandidate]

    @property
    def candidates(self) -> int:
        return len(self.claimed) + len(self.skipped)


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """How one attempt ends. `unlock`: release its lock_key's advisory lock in the same statement."""

    job_id: uuid.UUID
    attempt: int
    outcome: FinishOutcome
    lock_key: str
    unlock: bool
    error: str | None = None
    fatal: bool = False
    max_attempts: int | None = None
    delay_sec: float = 0.0
    reason: str | None = None


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


@cache
def claim_sql(limit: int) -> str:
    """claim_jobs.sql with a constant LIMIT (see the note in the file)."""
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"claim limit must be a positive int, got {limit!r}")
    return sql("claim_jobs").replace("{limit}", str(limit))


class QueueConnection:
    """The statements of a queue worker, on its control connection. Advisory locks are session
    locks: the connection that claims a job holds its lock_key until the finish unlocks it there."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def claim(self, queue: str, worker: str, limit: int = 1) -> ClaimBatch:
        """Claim up to `limit` jobs; each claimed job's lock_key is locked on this connection."""
        claimed: list[ClaimedJob] = []
        skipped: list[SkippedCandidate] = []
        for r in await self.conn.fetch(claim_sql(limit), queue, worker):
            if r["claimed"]:
                claimed.append(ClaimedJob(
                    job_id=r["job_id"], queue=r["queue"], task=r["task"], args=r["args"], lock_key=r["lock_key"],
                    partition_key=r["partition_key"], lease_ttl_sec=r["lease_ttl_sec"], attempt=r["attempt"],
                    max_attempts=r["max_attempts"], wait_sec=r["wait_sec"], lock_hash=r["lock_hash"],
                    request_id=r["request_id"],
                ))
            else:
                skipped.append(SkippedCandidate(
                    job_id=r["job_id"], queue=r["queue"], task=r["task"], lock_key=r["lock_key"],
                    lock_hash=r["lock_hash"], lock_busy=r["asked_lock"],
                ))
        return ClaimBatch(claimed, skipped)

    async def claim_one(self, queue: str, worker: str) -> ClaimedJob | None:
        batch = await self.claim(queue, worker, 1)
        return batch.claimed[0] if batch.claimed else None

    async def delay_lock_busy(self, job_id: uuid.UUID, delay_sec: float) -> datetime | None:
        """Hold back a queued job whose lock_key a stray session holds; None if it is no longer queued."""
        return await self.conn.fetchval(sql("delay_lock_busy"), job_id, delay_sec)

    async def unlock(self, lock_key: str) -> bool:
        return await self.conn.fetchval(sql("unlock_key"), lock_key)

    async def next_due_in(self, queue: str) -> float | None:
        """Seconds until the next delayed job of the queue is due (None: nothing delayed)."""
        return await self.conn.fetchval(sql("next_due_in"), queue)

    async def heartbeat(self, attempts: list[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, bool]:
        """Extend leases. Returns cancel_requested per attempt still held; fenced ones are absent."""
        rows = await self.conn.fetch(sql("heartbeat_jobs"), [a[0] for a in attempts], [a[1] for a in attempts])
        return {r["job_id"]: r["cancel_requested"] for r in rows}

    async def finish(self, requests: list[FinishRequest]) -> dict[uuid.UUID, FinishResult]:
        rows = await self.conn.fetch(
            sql("finish_jobs"),
            [r.job_id for r in requests], [r.attempt for r in requests], [r.outcome for r in requests],
            [r.error for r in requests], [r.fatal for r in requests], [r.max_attempts for r in requests],
            [float(r.delay_sec) for r in requests], [r.reason for r in requests],
            [r.lock_key for r in requests], [r.unlock for r in requests],
        )
        return {
            r["job_id"]: FinishResult(status=r["status"], available_at=r["available_at"], woken_queues=r["woken"])
            for r in rows
        }

    async def finish_one(self, request: FinishRequest) -> FinishResult:
        return (await self.finish([request]))[request.job_id]

    async def relock(self, attempts: list[tuple[uuid.UUID, int, str]]) -> dict[uuid.UUID, tuple[bool, bool]]:
        """Retake locks after a reconnect: (still ours in the table, lock taken) per attempt."""
        rows = await self.conn.fetch(sql("relock_jobs"), [a[0] for a in attempts], [a[1] for a in attempts],
                                     [a[2] for a in attempts])
        return {r["job_id"]: (r["alive"], bool(r["locked"])) for r in rows}

    async def lock_holders(self, job_id: uuid.UUID, lock_key: str) -> tuple[int, bool]:
        """After a failed lock: (running jobs holding the key, whether the lock is ours now)."""
        row = await self.conn.fetchrow(sql("lock_holders"), job_id, lock_key)
        assert row is not None
        return row["running_holders"], row["locked_now"]
