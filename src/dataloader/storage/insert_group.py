"""Group commit of single enqueues: the plain `enqueue` / `POST /api/v1/jobs/trigger` calls of
concurrent callers share one statement and one commit on one connection of their own.

Why: a single enqueue used to cost a pool acquire and release (~100 µs of client CPU, more than the
statement's encoding and decoding together) and a commit (a WAL flush) per job. Calls that arrive
while a statement is in flight wait for it, then go together in the next one, so a lone caller
pays one statement per call on a connection it never has to acquire, and N concurrent callers pay
about one statement and one commit per round trip instead of N (bench/README.md "Enqueue").

Each call keeps every promise of `insert_job.sql`: its own job id, its own 'queued' journal row in
the same statement, its own idempotency outcome (a known key inserts nothing, and the caller reads
the existing job), and its answer only after the statement that inserted its row committed. A
group the database refuses is run again one call per statement, so a row the database rejects
fails its own caller only. A connection error fails the calls of that group (their outcome is as
unknown as a single statement's cut off by the same error); the next group reconnects.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg

from dataloader.exceptions import InsertGroupClosed
from dataloader.storage.db import connect, is_connection_error
from dataloader.storage.queries import sql

# A statement of this many rows is still a few milliseconds; more waiting calls go in the next one.
MAX_GROUP = 500
# Like the pool's idle connections, the group's own is closed when unused for this long.
IDLE_CLOSE_SEC = 60.0
# The statements grouped (their callers' arguments are counted by tests/unit/test_query_parameters.py
# at the call of `insert`): a job with an idempotency key and one without (no ON CONFLICT). Their
# group forms are insert_job_group.sql and insert_job_group_unkeyed.sql; a group that mixes them
# runs the keyed form, which inserts an unkeyed row alike.
GROUPED_QUERIES = ("insert_job", "insert_job_unkeyed")


@dataclass(frozen=True, slots=True, eq=False)
class Waiting:
    query: str
    args: tuple[Any, ...]
    answer: asyncio.Future[Any]


class InsertGroup:
    """`insert("insert_job", *args)` runs `insert_job.sql` (or `insert_job_unkeyed.sql`) with `args`
    (job_id given) in a group with the calls waiting at the same time; returns the inserted row, or
    None when the idempotency_key already named a job. A group of several calls runs
    `insert_job_group.sql` (`insert_job_group_unkeyed.sql` when no call has a key), which takes the
    same parameters as arrays (one element per call)."""

    def __init__(self, dsn: str, *, max_group: int = MAX_GROUP, idle_close_sec: float = IDLE_CLOSE_SEC,
                 pooled: bool = False) -> None:
        self._dsn = dsn
        self._pooled = pooled  # through a transaction-pooling PgBouncer (storage/db.py _through_pooler)
        self._max_group = max_group
        self._idle_close_sec = idle_close_sec
        self._waiting: list[Waiting] = []
        self._in_flight: list[Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self._busy = False  # a statement is in flight (or about to be) on the connection
        self._idle = asyncio.Event()
        self._idle.set()
        self._conn: asyncpg.Connection | None = None
        self._used_at = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._closed = False
        self.statements = 0  # statements run, for tests and benchmarks

    async def insert(self, query: str, *args: Any) -> asyncpg.Record | None:
        if query not in GROUPED_QUERIES:
            raise ValueError(f"only {', '.join(GROUPED_QUERIES)} are grouped, not {query}")
        if self._closed:
            raise InsertGroupClosed("the App is closed")
        if self._busy:
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiting.append(Waiting(query, args, answer))
            return await answer
        # Nothing in flight: this call's statement runs right here, with no task or future in
        # between (the common case of one caller). Calls arriving meanwhile form the next group.
        self._busy = True
        self._idle.clear()
        try:
            conn = await self._connection()
            self.statements += 1
            return await conn.fetchrow(sql(query), *args)
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """The connection is free: the waiting calls go next, in a task of their own (a caller that
        is cancelled must not cancel its neighbours' statement); with none waiting, idle."""
        loop = asyncio.get_running_loop()
        if self._waiting:
            self._flusher = loop.create_task(self._flush_waiting())
        else:
            self._busy = False
            self._idle.set()
            self._used_at = loop.time()
            self._arm_idle_close()

    async def _flush_waiting(self) -> None:
        try:
            while self._waiting:
                group = self._waiting[:self._max_group]
                del self._waiting[:self._max_group]
                # A caller cancelled while waiting gave up before its statement: nothing is written.
                group = self._in_flight = [item for item in group if not item.answer.done()]
                if group:
                    await self._flush(group)
                self._in_flight = []
        finally:
            # Cancelled (App.close gave up waiting): no caller may wait forever.
            for item in (*self._in_flight, *self._waiting):
                if not item.answer.done():
                    item.answer.set_exception(InsertGroupClosed("the App closed before this enqueue ran"))
            self._in_flight, self._waiting, self._flusher = [], [], None
            self._busy = False
            self._idle.set()
            self._used_at = asyncio.get_running_loop().time()
            self._arm_idle_close()

    async def _flush(self, group: list[Waiting]) -> None:
        try:
            conn = await self._connection()
            self.statements += 1
            if len(group) == 1:
                rows = [await conn.fetchrow(sql(group[0].query), *group[0].args)]
            else:
                (job_ids, queues, tasks, args_json, idempotency_keys, lock_keys, partition_keys, priorities,
                 available_at, max_attempts, lease_ttl_sec, producers, request_ids, timeouts, chain_next,
                 traceparents) = (list(column) for column in zip(*(item.args for item in group), strict=True))
                columns = (job_ids, queues, tasks, args_json, idempotency_keys, lock_keys, partition_keys,
                           priorities, available_at, max_attempts, lease_ttl_sec, producers, request_ids,
                           timeouts, chain_next, traceparents)
                if any(item.query == "insert_job" for item in group):  # a keyed call: the keyed form
                    found = await conn.fetch(sql("insert_job_group"), *columns)
                else:
                    found = await conn.fetch(sql("insert_job_group_unkeyed"), *columns)
                inserted = {row["job_id"]: row for row in found}
                rows = [inserted.get(job_id) for job_id in job_ids]
        except Exception as exc:
            if len(group) > 1 and not is_connection_error(exc):
                # Nothing of the group was written (one statement); run each call on its own so a
                # row the database refuses fails only its own caller.
                for item in group:
                    await self._flush([item])
                return
            for item in group:
                if not item.answer.done():
                    item.answer.set_exception(exc)
            return
        for item, row in zip(group, rows, strict=True):
            if not item.answer.done():  # a caller cancelled meanwhile gets no answer; its job exists
                item.answer.set_result(row)

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await connect(self._dsn, pooled=self._pooled)
        return self._conn

    def _arm_idle_close(self) -> None:
        if self._idle_timer is None and self._conn is not None and not self._closed:
            self._idle_timer = asyncio.get_running_loop().call_later(self._idle_close_sec, self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle_timer = None
        loop = asyncio.get_running_loop()
        idle_for = loop.time() - self._used_at
        if not self._busy and self._conn is not None and idle_for >= self._idle_close_sec:
            conn, self._conn = self._conn, None
            self._closing = loop.create_task(conn.close(timeout=5))
        elif self._conn is not None:
            self._idle_timer = loop.call_later(max(0.0, self._idle_close_sec - idle_for), self._close_if_idle)

    async def close(self) -> None:
        """Finish the calls in flight and waiting (up to 10 s), then close the connection."""
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=10)
        except TimeoutError:
            if self._flusher is not None:
                self._flusher.cancel()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            if not self._idle.is_set():
                conn.terminate()
                return
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()
