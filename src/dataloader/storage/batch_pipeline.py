"""A large batch enqueue in chunks, in one transaction, with the caller's work on the next chunk
overlapping the database's work on the previous one.

Why: a batch of 100,000 jobs spends about a fifth of its time in Python (validation and building
the statement's arrays) and the rest in the statement (bench/README.md, issue 25 round three). As
one statement the two run one after the other on a 2-core machine; in chunks, chunk k+1 is
validated and built while the server inserts chunk k, so the call costs about the statement's
time plus one chunk's Python instead of the sum.

Every promise of the one-statement batch holds: all chunks run in one transaction on one
connection, so the batch commits whole or not at all (a bad item in a later chunk raises its
error and rolls back the chunks already sent); each chunk is `insert_jobs_batch.sql` /
`insert_jobs_batch_unkeyed.sql` with its journal rows and its statement-level NOTIFY; a known
idempotency key is skipped as in one statement (a key repeated in a later chunk conflicts with
the row the earlier chunk inserted in this transaction, as two rows of one statement do).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from dataloader.storage.queries import sql

# Chunks of this many jobs: small enough that the first chunk's Python (which nothing overlaps)
# is a few tens of milliseconds, large enough that the round trip per chunk is noise.
CHUNK_JOBS = 500
# A batch of up to this many jobs stays one statement: below it the pipeline's own round trips
# (BEGIN, COMMIT, one per chunk) cost what the overlap saves (100 × 1,000 jobs, chunks of 500 /
# one statement, 5 same-process pairs: 0.90-1.16, median 0.94; 1 × 100,000: 1.01-1.11).
PIPELINE_FROM_JOBS = 5_000


def is_unkeyed(columns: tuple[list[Any], ...]) -> bool:
    """Whether the unkeyed batch statement fits: no job has an idempotency key (nothing can be
    skipped, it returns a count) and every id is given. Else insert_jobs_batch.sql, which returns
    the inserted ids in input order."""
    return not any(columns[4]) and None not in columns[0]


async def insert_batch(fetch: Callable[..., Awaitable[Sequence[Any]]], columns: tuple[list[Any], ...],
                       producer: str | None, timeouts: list[int | None], request_id: str | None,
                       traceparent: str | None) -> list[uuid.UUID]:
    """One batch statement through `fetch(query, *args)` (a connection of ours, or a caller's
    through storage/caller_connection); the ids inserted, in input order."""
    ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases = columns
    params = (ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases,
              producer, timeouts, request_id, traceparent)
    if not is_unkeyed(columns):
        rows = await fetch(sql("insert_jobs_batch"), *params)
        # a caller's driver may give the ids as text
        return [v if isinstance(v := row["job_id"], uuid.UUID) else uuid.UUID(str(v)) for row in rows]
    count = (await fetch(sql("insert_jobs_batch_unkeyed"), *params))[0]["inserted"]
    if count != len(ids):  # cannot happen: a row it does not insert is an error
        raise RuntimeError(f"inserted {count} of {len(ids)} jobs")
    return list(ids)


class BatchPipeline:
    """`send` one chunk's arrays: it waits for the chunk before (at most one is in flight: a
    connection runs one statement at a time), then starts this one and returns once its message
    is written, so the caller builds the next chunk while the server works. `inserted_per_chunk`:
    each chunk's inserted ids in input order, complete once the last chunk answered."""

    def __init__(self, conn: asyncpg.Connection, producer: str | None, request_id: str | None,
                 traceparent: str | None) -> None:
        self._conn = conn
        self._producer = producer
        self._request_id = request_id
        self._traceparent = traceparent
        self._in_flight: asyncio.Task[list[uuid.UUID]] | None = None
        self.inserted_per_chunk: list[list[uuid.UUID]] = []

    async def send(self, columns: tuple[list[Any], ...], timeouts: list[int | None]) -> None:
        await self.collect()
        self._in_flight = asyncio.ensure_future(insert_batch(
            self._conn.fetch, columns, self._producer, timeouts, self._request_id, self._traceparent))
        # One turn of the loop runs the statement's task up to its first wait: asyncpg has
        # written the Bind/Execute (the statement is prepared after the first chunk).
        await asyncio.sleep(0)

    async def collect(self) -> None:
        if self._in_flight is not None:
            task, self._in_flight = self._in_flight, None
            self.inserted_per_chunk.append(await task)

    def abandon(self) -> bool:
        """After an error: True when no statement is in flight any more (the transaction can be
        rolled back); else the statement is cancelled and the caller must drop the connection."""
        task, self._in_flight = self._in_flight, None
        if task is None or task.done():
            if task is not None and not task.cancelled():
                task.exception()  # retrieved: its error is the one being raised, or moot
            return True
        task.cancel()
        return False


@asynccontextmanager
async def batch_pipeline(pool: asyncpg.Pool, producer: str | None, request_id: str | None,
                         traceparent: str | None) -> AsyncIterator[BatchPipeline]:
    """A pool connection and a transaction for one pipelined batch: committed when the block ends
    normally and every chunk answered; rolled back on any error or cancellation (a connection
    with a statement still in flight is closed instead, which aborts its transaction)."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        pipeline = BatchPipeline(conn, producer, request_id, traceparent)
        try:
            yield pipeline
            await pipeline.collect()
        except BaseException:
            if pipeline.abandon() and not conn.is_closed():
                try:
                    await transaction.rollback()
                except Exception:  # the error being raised says more; drop the connection
                    conn.terminate()
            elif not conn.is_closed():
                conn.terminate()
            raise
        await transaction.commit()
