"""SQL operations on the queue and its journal that run on the pool (enqueue, read, cancel, reap,
progress). All statements come from `queries/`. The statements of a queue worker's control
connection are in `queue_connection.py`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.model.ids import new_id
from dataloader.model.job import Job, JobEvent, JobStatus
from dataloader.model.queue_depth import QueueDepth
from dataloader.storage import caller_connection
from dataloader.storage.caller_connection import json_value
from dataloader.storage.insert_group import InsertGroup
from dataloader.storage.queries import sql


@dataclass(frozen=True, slots=True)
class NewJob:
    queue: str
    task: str
    lock_key: str
    args_json: str  # the args, already encoded (the size check encodes them anyway)
    idempotency_key: str | None = None
    partition_key: str = ""
    priority: int = 100
    available_at: datetime | None = None
    max_attempts: int = 5
    lease_ttl_sec: int = 60
    producer: str | None = None
    job_id: uuid.UUID | None = None
    timeout_sec: int | None = None  # the job's run-time limit (None: the pipeline's, or none)
    chain_next_json: str | None = None  # stages planned after it (JSON text; None: none)
    restartable: bool = False  # a trigger of its lock_key updates the queued job or queues one more run


@dataclass(frozen=True, slots=True)
class Inserted:
    """What an enqueue found: the job, whether this call created it, and for an existing one
    whether its stored args equal the request's (jsonb equality)."""

    job: Job
    created: bool
    same_args: bool = True


def _job(row: dict[str, Any]) -> Job:
    """A row read on any connection (a caller's may leave jsonb as text)."""
    row["job_id"] = as_uuid(row["job_id"])
    row["args"] = json_value(row.get("args"))
    row["progress"] = json_value(row.get("progress"))
    row["chain_next"] = json_value(row.get("chain_next"))
    row["result"] = _result_value(row.get("result"))
    return Job.from_row(row)


def inserted_job(job: NewJob, job_id: uuid.UUID, row: Any) -> Job:
    """The Job a row of insert_job.sql / insert_job_group.sql stands for: what the database decided
    (the stored args and plan as it decodes them, available_at, created_at) and the rest as sent or
    as the column defaults of a new row (status queued, attempt 0, empty progress). It saves
    decoding all of the row's columns per enqueue. Works on any connection (jsonb maybe as text).
    The statements answer NULL args for the empty object (the commonest: no decoding per call)."""
    args = row["args"]
    return Job(
        id=job_id, queue=job.queue, task=job.task, args={} if args is None else json_value(args), lock_key=job.lock_key,
        status=JobStatus.queued, attempt=0, max_attempts=job.max_attempts, priority=job.priority,
        available_at=row["available_at"], created_at=row["created_at"], idempotency_key=job.idempotency_key,
        partition_key=job.partition_key, lease_ttl_sec=job.lease_ttl_sec, progress={}, producer=job.producer,
        timeout_sec=job.timeout_sec, chain_id=job_id if job.chain_next_json is not None else None,
        chain_next=json_value(row["chain_next"]))


def as_uuid(value: Any) -> uuid.UUID:
    """A uuid column as the caller's driver decoded it (some give text)."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _result_value(value: Any) -> Any:
    """The result column read on a caller's connection. Unlike args and progress (objects), a result
    may be a JSON string, so a str is ambiguous: text the driver left undecoded, or a decoded JSON
    string. Text that parses is taken as undecoded; anything else is the decoded string itself."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class JobRepository:
    """`insert_group`: where single enqueues on the pool go (group commit, storage/insert_group.py);
    without one, each takes a pool connection."""

    def __init__(self, pool: asyncpg.Pool, insert_group: InsertGroup | None = None) -> None:
        self.pool = pool
        self.insert_group = insert_group

    async def insert_job(self, job: NewJob, request_id: str | None = None, *, conn: Any = None,
                         traceparent: str | None = None) -> Inserted:
        """Insert a job, or find the existing one with the same idempotency_key. With `conn` (the
        caller's connection), inside the caller's transaction. `traceparent`: the caller's span (0020)."""
        job_id = job.job_id or new_id()
        params = (job_id, job.queue, job.task, job.args_json, job.idempotency_key, job.lock_key,
                  job.partition_key, job.priority, job.available_at, job.max_attempts, job.lease_ttl_sec,
                  job.producer, request_id, job.timeout_sec, job.chain_next_json, traceparent)
        existing_params = (job.idempotency_key, job.args_json)  # get_job_by_idempotency_key.sql
        if job.restartable:
            # insert_restartable_job.sql: created (a new job) or not (the queued one, updated)
            if conn is not None:
                rows = await caller_connection.fetch(conn, sql("insert_restartable_job"), *params)
                if rows:
                    return Inserted(_job(rows[0]), bool(rows[0]["created"]))
            else:
                row = await self.pool.fetchrow(sql("insert_restartable_job"), *params)
                if row is not None:
                    return Inserted(Job.from_row(row), bool(row["created"]))
            existing_job = await self._queued_restartable(job.lock_key, conn)
            if existing_job is None:  # claimed between the two statements: trigger again
                return await self.insert_job(job, request_id, conn=conn, traceparent=traceparent)
            return Inserted(existing_job, False)
        if conn is not None:
            rows = await caller_connection.fetch(conn, sql("insert_job"), *params)
            if rows:
                return Inserted(inserted_job(job, job_id, rows[0]), True)
            existing = await caller_connection.fetch(conn, sql("get_job_by_idempotency_key"), *existing_params)
        elif self.insert_group is not None:
            row = await self.insert_group.insert("insert_job", *params)
            if row is not None:
                return Inserted(inserted_job(job, job_id, row), True)
            existing = [dict(r) for r in await self.pool.fetch(sql("get_job_by_idempotency_key"), *existing_params)]
        else:
            async with self.pool.acquire() as pool_conn:
                row = await pool_conn.fetchrow(sql("insert_job"), *params)
                if row is not None:
                    return Inserted(inserted_job(job, job_id, row), True)
                existing = [dict(r) for r in await pool_conn.fetch(sql("get_job_by_idempotency_key"),
                                                                   *existing_params)]
        if not existing:  # the conflicting row was deleted between the two statements
            return await self.insert_job(job, request_id, conn=conn, traceparent=traceparent)
        # rows read on the pool are decoded by its codecs: no guessing needed
        job = _job(existing[0]) if conn is not None else Job.from_row(existing[0])
        return Inserted(job, False, bool(existing[0]["same_args"]))

    async def _queued_restartable(self, lock_key: str, conn: Any) -> Job | None:
        """The queued restartable job of `lock_key` (read after a trigger that found one of another
        task or queue and changed nothing)."""
        if conn is not None:
            rows = await caller_connection.fetch(conn, sql("get_queued_restartable_job"), lock_key)
            return _job(rows[0]) if rows else None
        row = await self.pool.fetchrow(sql("get_queued_restartable_job"), lock_key)
        return Job.from_row(row) if row is not None else None

    async def insert_jobs(self, jobs: list[NewJob], producer: str | None = None, *, conn: Any = None,
                          traceparent: str | None = None) -> list[uuid.UUID]:
        """Insert many jobs in one statement; returns the ids of the rows actually inserted, in
        input order (a job without job_id gets one from the database)."""
        if not jobs:
            return []
        cols = tuple(list(col) for col in zip(*((j.job_id, j.queue, j.task, j.args_json, j.idempotency_key,
                                                  j.lock_key, j.partition_key, j.priority, j.available_at,
                                                  j.max_attempts, j.lease_ttl_sec) for j in jobs), strict=True))
        return await self.insert_job_columns(cols, producer, [j.timeout_sec for j in jobs], conn=conn,
                                             traceparent=traceparent)

    async def insert_job_columns(self, columns: tuple[list[Any], ...], producer: str | None,
                                 timeouts: list[int | None], *, conn: Any = None,
                                 request_id: str | None = None, traceparent: str | None = None) -> list[uuid.UUID]:
        """insert_jobs_batch.sql with its arrays ($1..$11, $13) built by the caller."""
        ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases = columns
        params = (ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases,
                  producer, timeouts, request_id, traceparent)
        if not any(keys) and None not in ids:  # nothing can be skipped: the cheaper statement
            if conn is not None:
                rows = await caller_connection.fetch(conn, sql("insert_jobs_batch_unkeyed"), *params)
                count = rows[0]["inserted"]
            else:
                count = await self.pool.fetchval(sql("insert_jobs_batch_unkeyed"), *params)
            if count != len(ids):  # cannot happen: a row it does not insert is an error
                raise RuntimeError(f"inserted {count} of {len(ids)} jobs")
            return list(ids)
        if conn is not None:
            rows = await caller_connection.fetch(conn, sql("insert_jobs_batch"), *params)
            return [as_uuid(row["job_id"]) for row in rows]  # a caller's driver may give text
        return [row["job_id"] for row in await self.pool.fetch(sql("insert_jobs_batch"), *params)]

    async def get_chain(self, chain_or_job_id: uuid.UUID, limit: int) -> list[Job]:
        return [Job.from_row(row) for row in await self.pool.fetch(sql("get_chain"), chain_or_job_id, limit)]

    async def get_job(self, job_id: uuid.UUID) -> Job | None:
        row = await self.pool.fetchrow(sql("get_job"), job_id)
        return None if row is None else Job.from_row(row)

    async def cancel_job(self, job_id: uuid.UUID, request_id: str | None = None) -> str | None:
        """Request cancellation. Returns the status before the call, or None if no such job."""
        row = await self.pool.fetchrow(sql("cancel_job"), job_id, request_id)
        return None if row is None else row["previous_status"]

    async def retry_job(self, job_id: uuid.UUID, request_id: str | None = None) -> tuple[str | None, bool]:
        """Back to the queue with a fresh attempt budget. (status before, whether it was retried);
        status None: no such job."""
        row = await self.pool.fetchrow(sql("retry_job"), job_id, request_id)
        return (None, False) if row is None else (row["previous_status"], row["retried"])

    async def set_job_priority(self, job_id: uuid.UUID, priority: int, request_id: str | None = None
                               ) -> tuple[str | None, int | None, bool]:
        """A queued job's new priority, journaled. (status before, priority before, whether it
        changed); status None: no such job."""
        row = await self.pool.fetchrow(sql("set_job_priority"), job_id, priority, request_id)
        if row is None:
            return None, None, False
        return row["previous_status"], row["previous_priority"], row["changed"]

    async def delete_job(self, job_id: uuid.UUID) -> tuple[str | None, str | None, bool]:
        """Delete a finished job with its journal. (status before, its queue, whether it was
        deleted); status None: no such job."""
        row = await self.pool.fetchrow(sql("delete_job"), job_id)
        return (None, None, False) if row is None else (row["previous_status"], row["queue"], row["deleted"])

    async def list_events(self, job_id: uuid.UUID, after_event_id: int = 0, limit: int = 1000) -> list[JobEvent]:
        rows = await self.pool.fetch(sql("list_job_events"), job_id, after_event_id, limit)
        return [JobEvent.from_row(row) for row in rows]

    async def reap_expired(self, batch_size: int = 1000) -> list[asyncpg.Record]:
        """The jobs taken back. The statement also unparks the heads of keys left with parked jobs
        and nothing running (0017); its row with a NULL job_id, when nothing was reaped, is dropped."""
        return [r for r in await self.pool.fetch(sql("reap_expired"), batch_size) if r["job_id"] is not None]

    async def set_progress(self, job_id: uuid.UUID, attempt: int, progress: dict[str, Any]) -> bool | None:
        """Store progress. Returns cancel_requested, or None if the attempt was fenced off."""
        row = await self.pool.fetchrow(sql("set_progress"), job_id, attempt, progress)
        return None if row is None else row["cancel_requested"]

    @staticmethod
    async def finish_in_transaction(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int,
                                    next_json: str | None = None, span: str | None = None) -> bool:
        """Mark the attempt's job succeeded in `conn`'s open transaction (the pipeline's), with the
        jobs its success enqueues (`next_json`, chains; `span`: the attempt's, their traceparent).
        False: the attempt was fenced off and the caller must roll the transaction back."""
        return await conn.fetchval(sql("finish_in_transaction"), job_id, attempt, next_json, span) is not None

    async def queue_stats(self) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("queue_stats"))

    async def queue_depths(self) -> list[QueueDepth]:
        return [QueueDepth(queue=r["queue"], queued=r["queued"], delayed=r["delayed"], running=r["running"],
                           held=r["held"], oldest_waiting_sec=r["oldest_waiting_sec"])
                for r in await self.pool.fetch(sql("queue_depths"))]

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
    ) -> list[Job]:
        """Jobs newest first, without args; `before` is the (created_at, job_id) of the previous
        page's last row."""
        before_at, before_id = before if before is not None else (None, None)
        rows = await self.pool.fetch(
            sql("list_jobs"), queue, task, statuses or None, created_from, created_to,
            before_at, before_id, limit,
        )
        return [Job.from_row(row) for row in rows]

    async def schema_revision(self) -> str | None:
        """The migration revision of the database, or None when it was never migrated."""
        try:
            return await self.pool.fetchval(sql("schema_revision"))
        except asyncpg.exceptions.UndefinedTableError:
            return None
