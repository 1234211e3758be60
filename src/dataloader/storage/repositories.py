"""SQL operations on the queue and its journal (enqueue, read, cancel, reap, progress), run on an
executor (storage/executor.py): an enqueue on the one its caller gives (the group commit, the
caller's transaction, the scheduler's), the rest on the repository's own. All statements come from
`queries/`; the rows become model values in model/stored_job.py. The statements of a queue
worker's control connection are in `queue_connection.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.model import payload_crypto
from dataloader.model.ids import new_id
from dataloader.model.job import Job, JobEvent, JobListing, JoinState
from dataloader.model.queue_depth import QueueDepth
from dataloader.model.stored_job import Inserted, NewJob, as_uuid, enqueued
from dataloader.storage.executor import Executor, executor_of
from dataloader.storage.queries import sql

__all__ = ["Inserted", "JobRepository", "NewJob"]


class JobRepository:
    """`on`: where this repository's own statements run: the pool, or the group commit in front of
    it (storage/executor.py). An enqueue runs on the executor its caller gives (the caller's
    transaction, say); the repository never chooses."""

    def __init__(self, on: Executor | asyncpg.Pool) -> None:
        self.on = executor_of(on)

    async def insert_job(self, job: NewJob, on: Executor, request_id: str | None = None, *,
                         traceparent: str | None = None) -> Inserted:
        """Insert a job, or find the job its idempotency key (a restartable's: its lock_key) names
        already, on `on`. `traceparent`: the caller's span (0020)."""
        job_id = job.job_id or new_id()
        # Encrypted at rest when DL_ENCRYPTION_KEYS is set (model/payload_crypto.py); else as given.
        args = payload_crypto.seal_args(job.task, job.args_json)
        params = (job_id, job.queue, job.task, args, job.idempotency_key, job.lock_key,
                  job.partition_key, job.priority, job.available_at, job.max_attempts, job.lease_ttl_sec,
                  job.producer, request_id, job.timeout_sec, job.chain_next_json, traceparent)
        while True:
            if job.restartable:  # a new job, or the queued one of its key updated; else that one
                inserted = await on.fetchrow(sql("insert_restartable_job"), *params)
                found = None if inserted is not None else await on.fetchrow(
                    sql("get_queued_restartable_job"), job.lock_key)
            elif job.idempotency_key is None:  # nothing can conflict: the statement without ON CONFLICT
                inserted = await on.fetchrow(sql("insert_job_unkeyed"), *params)
                found = None
            else:  # a new job, or the one its idempotency key names (with whether its args are the same)
                inserted = await on.fetchrow(sql("insert_job"), *params)
                found = None if inserted is not None else await on.fetchrow(
                    sql("get_job_by_idempotency_key"), job.idempotency_key, args)
            if inserted is not None or found is not None:
                return enqueued(job, job_id, inserted, found, on.decoded, sealed=args is not job.args_json)
            # Neither: the row in the way was deleted (or claimed) between the two statements.

    async def insert_jobs(self, jobs: list[NewJob], on: Executor, producer: str | None = None, *,
                          traceparent: str | None = None) -> list[uuid.UUID]:
        """Insert many jobs in one statement; returns the ids of the rows actually inserted, in
        input order (a job without job_id gets a new time-ordered one here)."""
        if not jobs:
            return []
        cols = tuple(list(col) for col in zip(*((j.job_id or new_id(), j.queue, j.task, j.args_json,
                                                  j.idempotency_key, j.lock_key, j.partition_key, j.priority,
                                                  j.available_at, j.max_attempts, j.lease_ttl_sec)
                                                 for j in jobs), strict=True))
        return await self.insert_job_columns(cols, on, producer, [j.timeout_sec for j in jobs],
                                             traceparent=traceparent)

    async def insert_job_columns(self, columns: tuple[list[Any], ...], on: Executor, producer: str | None,
                                 timeouts: list[int | None], *, request_id: str | None = None,
                                 traceparent: str | None = None) -> list[uuid.UUID]:
        """insert_jobs_batch.sql with its columns built by the caller (ids, queues, tasks, args JSON,
        keys, lock_keys (None: the job's id), partitions, priorities, available_at, max_attempts,
        leases; all ids given) and each job's timeout, on `on`."""
        ids = columns[0]
        unkeyed = not any(columns[4])
        if payload_crypto.active() is not None:  # encrypted at rest (model/payload_crypto.py)
            seal = payload_crypto.seal_args
            columns = (*columns[:3], [seal(task, args) for task, args in zip(columns[2], columns[3], strict=True)],
                       *columns[4:])
        a, f = batch_arrays((*columns[1:], timeouts))
        params = (ids, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], producer, request_id,
                  traceparent, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10])
        if unkeyed:  # nothing can be skipped: the cheaper statement
            count = await on.fetchval(sql("insert_jobs_batch_unkeyed"), *params)
            if count != len(ids):  # cannot happen: a row it does not insert is an error
                raise RuntimeError(f"inserted {count} of {len(ids)} jobs")
            return list(ids)
        # a caller's driver may give the ids as text
        return [as_uuid(row["job_id"]) for row in await on.fetch(sql("insert_jobs_batch"), *params)]


    async def get_chain(self, chain_or_job_id: uuid.UUID, limit: int) -> tuple[list[Job], dict[uuid.UUID, JoinState]]:
        """A chain's jobs, and the state of each of its join stages by the join's job id."""
        rows = await self.on.fetch(sql("get_chain"), chain_or_job_id, limit)
        joins = {row["job_id"]: JoinState(row["join_members"], row["join_remaining"])
                 for row in rows if row["join_members"] is not None}
        return [Job.from_row(row) for row in rows], joins

    async def get_job(self, job_id: uuid.UUID) -> Job | None:
        row = await self.on.fetchrow(sql("get_job"), job_id)
        return None if row is None else Job.from_row(row)

    async def cancel_job(self, job_id: uuid.UUID, request_id: str | None = None) -> str | None:
        """Request cancellation. Returns the status before the call, or None if no such job."""
        row = await self.on.fetchrow(sql("cancel_job"), job_id, request_id)
        return None if row is None else row["previous_status"]

    async def retry_job(self, job_id: uuid.UUID, request_id: str | None = None) -> tuple[str | None, bool]:
        """Back to the queue with a fresh attempt budget. (status before, whether it was retried);
        status None: no such job."""
        row = await self.on.fetchrow(sql("retry_job"), job_id, request_id)
        return (None, False) if row is None else (row["previous_status"], row["retried"])

    async def set_job_priority(self, job_id: uuid.UUID, priority: int, request_id: str | None = None
                               ) -> tuple[str | None, int | None, bool]:
        """A queued job's new priority, journaled. (status before, priority before, whether it
        changed); status None: no such job."""
        row = await self.on.fetchrow(sql("set_job_priority"), job_id, priority, request_id)
        if row is None:
            return None, None, False
        return row["previous_status"], row["previous_priority"], row["changed"]

    async def delete_job(self, job_id: uuid.UUID) -> tuple[str | None, str | None, bool]:
        """Delete a finished job with its journal. (status before, its queue, whether it was
        deleted); status None: no such job."""
        row = await self.on.fetchrow(sql("delete_job"), job_id)
        return (None, None, False) if row is None else (row["previous_status"], row["queue"], row["deleted"])

    async def list_events(self, job_id: uuid.UUID, after_event_id: int = 0, limit: int = 1000) -> list[JobEvent]:
        rows = await self.on.fetch(sql("list_job_events"), job_id, after_event_id, limit)
        return [JobEvent.from_row(row) for row in rows]

    async def reap_expired(self, batch_size: int = 1000,
                           orphaned: Sequence[tuple[uuid.UUID, int]] = ()) -> list[asyncpg.Record]:
        """The jobs taken back: those whose lease expired, and `orphaned` (job id, attempt) whose worker
        was found dead. The statement also unparks the heads of keys left with parked jobs and nothing
        running (0017); its row with a NULL job_id, when nothing was reaped, is dropped."""
        ids = [job_id for job_id, _ in orphaned]
        attempts = [attempt for _, attempt in orphaned]
        rows = await self.on.fetch(sql("reap_expired"), batch_size, ids, attempts)
        return [r for r in rows if r["job_id"] is not None]

    async def running_picked_by(self, workers: Sequence[tuple[str, datetime | None]]) -> list[tuple[uuid.UUID, int]]:
        """(job id, attempt) of the running jobs whose current attempt one of `workers` (name, and
        claims from when on are not its) claimed in a session that is gone (running_picked_by.sql)."""
        rows = await self.on.fetch(sql("running_picked_by"), [name for name, _ in workers],
                                   [before for _, before in workers])
        return [(row["job_id"], row["attempt"]) for row in rows]

    async def set_progress(self, job_id: uuid.UUID, attempt: int, progress: dict[str, Any]) -> bool | None:
        """Store progress. Returns cancel_requested, or None if the attempt was fenced off."""
        row = await self.on.fetchrow(sql("set_progress"), job_id, attempt, payload_crypto.seal_value(progress))
        return None if row is None else row["cancel_requested"]

    @staticmethod
    async def finish_in_transaction(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int,
                                    next_json: str | None = None, span: str | None = None) -> bool:
        """Mark the attempt's job succeeded in `conn`'s open transaction (the pipeline's), with the
        jobs its success enqueues (`next_json`, chains; `span`: the attempt's, their traceparent).
        False: the attempt was fenced off and the caller must roll the transaction back."""
        return await conn.fetchval(sql("finish_in_transaction"), job_id, attempt, next_json, span) is not None

    async def queue_stats(self) -> list[asyncpg.Record]:
        return await self.on.fetch(sql("queue_stats"))

    async def queue_depths(self) -> list[QueueDepth]:
        return [QueueDepth(queue=r["queue"], queued=r["queued"], delayed=r["delayed"], running=r["running"],
                           held=r["held"], oldest_waiting_sec=r["oldest_waiting_sec"])
                for r in await self.on.fetch(sql("queue_depths"))]

    async def list_jobs(self, listing: JobListing, *, before: tuple[datetime, uuid.UUID] | None = None,
                        limit: int = 100) -> list[Job]:
        """The jobs `listing` matches, newest first, without args; `before` is the (created_at,
        job_id) of the previous page's last row."""
        before_at, before_id = before if before is not None else (None, None)
        rows = await self.on.fetch(
            sql("list_jobs"), listing.queue, listing.task, listing.statuses or None, listing.created_from,
            listing.created_to, before_at, before_id, limit,
        )
        return [Job.from_row(row) for row in rows]

    async def schema_revision(self) -> str | None:
        """The migration revision of the database, or None when it was never migrated."""
        try:
            return await self.on.fetchval(sql("schema_revision"))
        except asyncpg.exceptions.UndefinedTableError:
            return None


def batch_arrays(columns: Sequence[list[Any]]) -> tuple[list[list[Any]], list[Any]]:
    """insert_jobs_rows.sql's arrays and fills: a column with one value for every job is sent as an
    empty array and that value as its fill (one value to encode instead of one per job), any other
    column in full with a NULL fill. list.count compares in C: far cheaper than encoding the array."""
    arrays: list[list[Any]] = []
    fills: list[Any] = []
    for column in columns:
        first = column[0]
        if column.count(first) == len(column):
            arrays.append([])
            fills.append(first)
        else:
            arrays.append(column)
            fills.append(None)
    return arrays, fills
