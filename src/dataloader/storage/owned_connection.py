"""One pooled connection with exactly one owner, from its acquire to its release.

A queue worker's control connection lives for many steps and holds session state (its jobs'
lock_key advisory locks), so who may use it, and until when, must not be a matter of luck:

- asyncpg takes a pooled connection back on its own when its session dies (the server terminated
  it, the socket broke): the pool's holder is free again at once, and the proxy the owner still
  holds answers "released back to the pool". The owner looks before every statement (the proxy
  closed or detached; asyncpg's termination listeners run a loop turn too late for this), and
  every use after that raises `SessionLost` (a connection error: the caller reconnects, as after
  any loss) instead of reaching for a connection it no longer has.
- A session the server terminated while it was idle sends its FATAL error before the socket
  closes: in between, asyncpg's protocol is still "consuming an error" and the next statement is
  refused with "cannot switch to state N; another operation (2) is in progress".
  GuardedConnection (storage/db.py) tells that dying session (SessionEnded) from a real second
  operation, and the owner marks the connection lost.
- Operations never overlap: a second one started while one runs is a bug, raised at once as
  `ConnectionOwnershipError` (never retried as weather), not queued behind the first.
- After `release()`, `terminate()` or `quarantine()` every use raises `ConnectionOwnershipError`:
  a stale reference can never run a statement on a connection that may already be another
  coroutine's (inside its transaction, or holding its session locks).

Only the statements the worker needs are offered (`fetch`, `fetchrow`, `fetchval`, `execute`,
`transaction`); the raw connection is never handed out while the owner holds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from dataloader.storage.db import SessionEnded


class ConnectionOwnershipError(RuntimeError):
    """A connection was used after its owner gave it up, or by two operations at once: a bug."""


class SessionLost(SessionEnded):
    """The owned connection's session had ended before a statement was sent (asyncpg already took
    the connection back): acquire a new one. A connection error (weather), as SessionEnded."""


class OwnedConnection:
    """A connection acquired from `pool`, usable only through this owner and only while held."""

    def __init__(self, pool: asyncpg.Pool, conn: asyncpg.Connection, name: str) -> None:
        self.name = name
        self._pool = pool
        self._conn: asyncpg.Connection | None = conn
        self._lost: str | None = None  # why the session ended, once it did
        self._gone: str | None = None  # how the owner gave it up: released, terminated, quarantined
        self._running: str | None = None  # the operation running on it now

    @classmethod
    async def acquire(cls, pool: asyncpg.Pool, name: str) -> OwnedConnection:
        return cls(pool, await pool.acquire(), name)

    @property
    def lost(self) -> bool:
        """The session ended: nothing it held (session locks) survives, and it cannot be used."""
        if self._lost is None and self._conn is not None:
            try:
                ended = self._conn.is_closed()
            except asyncpg.exceptions.InterfaceError:
                ended = True  # asyncpg gave it back to the pool as its session ended
            if ended:
                self._lost = "the session ended"
        return self._lost is not None

    @property
    def held(self) -> bool:
        """Still this owner's (though perhaps lost)."""
        return self._gone is None

    def _check(self, what: str) -> asyncpg.Connection:
        if self._gone is not None or self._conn is None:
            raise ConnectionOwnershipError(
                f"{self.name}: {what} on a connection used after its release ({self._gone})")
        if self._running is not None:
            raise ConnectionOwnershipError(
                f"{self.name}: {what} started while {self._running} still runs on the same connection")
        if self.lost:
            raise SessionLost(f"{self.name}: {self._lost}; {what} not sent")
        return self._conn

    @asynccontextmanager
    async def _operation(self, what: str) -> AsyncIterator[asyncpg.Connection]:
        conn = self._check(what)
        self._running = what
        try:
            yield conn
        except SessionEnded:
            self._lost = "the session ended while the connection was idle"
            raise
        finally:
            self._running = None

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._operation("fetch") as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self._operation("fetchrow") as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self._operation("fetchval") as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self._operation("execute") as conn:
            return await conn.execute(query, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A transaction around the statements of the block (made through this owner). If the block
        fails the transaction is rolled back, or, if that fails too, the connection is terminated."""
        async with self._operation("BEGIN") as conn:
            tx = conn.transaction()
            await tx.start()
        try:
            yield
        except BaseException:
            if self._gone is None and not self.lost:
                try:
                    async with self._operation("ROLLBACK"):
                        await tx.rollback()
                except BaseException:
                    self.terminate()
            raise
        async with self._operation("COMMIT"):
            await tx.commit()

    def terminate(self) -> None:
        """End the session (its session locks with it) and give the connection up. Allowed while
        an operation runs (that operation then fails as on any lost connection)."""
        self._running = None
        _end(self._give_up("terminated"))

    async def release(self) -> None:
        """Give the connection back to the pool; a lost one is ended instead (asyncpg has taken it
        back already, or is about to)."""
        lost = self.lost
        conn = self._give_up("released")
        if conn is not None and lost:
            _end(conn)
        elif conn is not None:
            await self._pool.release(conn)

    def quarantine(self) -> asyncpg.Connection | None:
        """Give the connection up without releasing it (it keeps its session locks until the process
        exits); the caller keeps the returned connection only to hold it, never to use it."""
        return self._give_up("quarantined")

    def _give_up(self, how: str) -> asyncpg.Connection | None:
        if self._running is not None:
            raise ConnectionOwnershipError(f"{self.name}: {how} while {self._running} still runs on it")
        conn, self._conn = self._conn, None
        if self._gone is None:
            self._gone = how
        return conn


def _end(conn: asyncpg.Connection | None) -> None:
    if conn is None:
        return
    try:
        conn.terminate()  # asyncpg frees the pool's holder itself
    except asyncpg.exceptions.InterfaceError:
        pass  # the pool took it back already (its session had ended): nothing is left to end
