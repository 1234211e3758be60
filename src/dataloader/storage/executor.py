"""Where a statement runs: the pool, a transaction, the caller's connection, or the group commit.

A storage method says WHAT to run (a statement of queries/ and its parameters); the executor it is
given says WHERE. Before, each method chose by hand between the pool, the caller's connection
(`enqueue(..., conn=)`) and the group insert, so every enqueue statement was written three times
and a request crossed between the repository and the connection helpers a dozen times. Now the
caller decides once, when it makes the executor, and the method runs its statements on it:

    Pooled(pool)             each statement on a pool connection (asyncpg's pool, as it is)
    InTransaction(conn)      our own connection inside a transaction we opened: statements that
                             must commit together (a state change and its journal row)
    CallersConnection(conn)  the caller's connection, inside the caller's transaction (asyncpg,
                             SQLAlchemy async, or a sync program's `SyncConnection`)
    GroupCommit(group, on)   `insert_job.sql` joins the concurrent callers' group (one statement and
                             one commit for many; storage/insert_group.py); anything else runs `on`

The idea is River's driver `Executor` ("a pool or a transaction", the caller decides) and
Procrastinate's `*_with_connection`; the code is ours. Every executor answers the same four
calls as an asyncpg pool or connection, so a method written against it runs on any of them.

`decoded` says how its rows come back: True where dataloader's codecs decoded them (jsonb as
Python values, uuid as UUID: our pool and connections), False on a caller's connection, whose
driver may leave jsonb as text (model/stored_job.py reads both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import asyncpg

from dataloader.storage import caller_connection
from dataloader.storage.insert_group import GROUPED_QUERIES, InsertGroup
from dataloader.storage.queries import sql


@runtime_checkable
class Executor(Protocol):
    """What a storage method runs its statements on. Rows are mappings by column name."""

    decoded: bool

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any | None: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...

    async def execute(self, query: str, *args: Any) -> Any: ...


class Pooled:
    """Each statement on a connection of the pool, in a transaction of its own (autocommit)."""

    __slots__ = ("pool",)
    decoded = True

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await self.pool.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        return await self.pool.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.pool.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.pool.execute(query, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[InTransaction]:
        """One pool connection in one transaction for the block: its statements commit together,
        or none does."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield InTransaction(conn)


class InTransaction:
    """Our own asyncpg connection (pool or dedicated), inside a transaction its owner opened."""

    __slots__ = ("conn",)
    decoded = True

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await self.conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        return await self.conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.conn.execute(query, *args)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        """This transaction's connection, where code written against a pool asks the pool for one: a
        repository handed this executor in place of its pool (storage/audit_repository.py `within`)
        runs inside the transaction, and a `conn.transaction()` it opens there is a savepoint."""
        yield self.conn


class CallersConnection:
    """The caller's connection (`enqueue(..., conn=)`): the statement joins the caller's transaction,
    so the job exists if and only if it commits. storage/caller_connection.py runs it on whatever
    the caller holds; rows come back as dicts, decoded as the caller's driver decodes them."""

    __slots__ = ("conn",)
    decoded = False

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await caller_connection.fetch(self.conn, query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        rows = await caller_connection.fetch(self.conn, query, *args)
        return rows[0] if rows else None

    async def fetchval(self, query: str, *args: Any) -> Any:
        rows = await caller_connection.fetch(self.conn, query, *args)
        return next(iter(rows[0].values())) if rows else None

    async def execute(self, query: str, *args: Any) -> Any:
        await caller_connection.fetch(self.conn, query, *args)


class GroupCommit:
    """Single enqueues of concurrent callers in one statement and one commit (InsertGroup); every
    other statement (the read of an existing job after a known idempotency_key, say) runs on `on`,
    the pool. Only `insert_job.sql` and `insert_job_unkeyed.sql` are grouped (insert_group.py
    GROUPED_QUERIES names their group forms)."""

    __slots__ = ("_grouped", "group", "on")
    decoded = True

    def __init__(self, group: InsertGroup, on: Pooled) -> None:
        self.group = group
        self.on = on
        self._grouped = {sql(name): name for name in GROUPED_QUERIES}

    async def fetch(self, query: str, *args: Any) -> Sequence[Any]:
        return await self.on.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        name = self._grouped.get(query)  # sql() caches its text: the very string comes back
        if name is not None:
            return await self.group.insert(name, *args)
        return await self.on.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.on.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.on.execute(query, *args)


def executor_of(runner: Executor | asyncpg.Pool | asyncpg.Connection | Any) -> Executor:
    """`runner` as an executor: an executor as it is; our pool or connection wrapped. For code that
    still hands a pool or a connection of its own (the duties, the process steps)."""
    if isinstance(runner, Pooled | InTransaction | CallersConnection | GroupCommit):
        return runner
    if isinstance(runner, asyncpg.Pool):
        return Pooled(runner)
    if isinstance(runner, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        return InTransaction(runner)
    return CallersConnection(runner)
