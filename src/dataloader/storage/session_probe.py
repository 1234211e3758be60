"""Does a DSN give us a real session? The probe behind the refusal to start on a transaction-pooling
PgBouncer without DL_DB_DIRECT_DSN (docs/scaling.md "PgBouncer").

Session advisory locks (a lock_key's, the leader's, the migration's) and LISTEN belong to a server
session. Behind a transaction-pooling PgBouncer a client connection has no session of its own: each
transaction runs on whichever server connection is free, so a lock taken by one statement is held
by a server session that serves other clients next, and a LISTEN hears nothing. Nothing fails
loudly; the promises just stop holding. So the node asks before it relies on a session:

1. the backend pid the server announced at connection start (BackendKeyData) against the pid a
   statement reports. PostgreSQL announces its own; a pooler announces a key of its own (it must
   receive the cancel requests), so a difference means "a pooler is in between". Equal: a direct
   session, done, one statement.
2. Behind a pooler, session pooling is fine and transaction (or statement) pooling is not. Two
   client connections A and B ask `pg_backend_pid()` as A, B, A, three times. A session pooler
   gives A one server for its whole life and never lends it to B: A's answers are all equal and B's
   differ from them. A transaction pooler hands A's server back after each statement: an idle
   pool gives it to B next (same pid), a busy one moves A elsewhere (A's answers differ). Either
   observation is proof; neither can happen on a session, so the probe never refuses a good DSN.
"""

from __future__ import annotations

import asyncio
import enum

import asyncpg

from dataloader.storage.db import asyncpg_dsn
from dataloader.storage.queries import sql

ROUNDS = 3
CONNECT_TIMEOUT_SEC = 10.0


class Pooling(enum.Enum):
    DIRECT = "direct"  # PostgreSQL itself
    SESSION = "session"  # a pooler that gives each client connection one server session
    TRANSACTION = "transaction"  # a pooler that moves a client between sessions (transaction/statement)

    @property
    def has_sessions(self) -> bool:
        return self is not Pooling.TRANSACTION


async def _open(dsn: str) -> asyncpg.Connection:
    # No start-up settings and no named statements: a transaction pooler refuses the first and
    # loses the second, and the probe must get far enough to tell.
    return await asyncpg.connect(asyncpg_dsn(dsn), statement_cache_size=0, timeout=CONNECT_TIMEOUT_SEC)


async def probe(dsn: str) -> Pooling:
    """How `dsn` pools sessions (module docstring). Connection errors propagate."""
    a = await _open(dsn)
    try:
        pid = await a.fetchval(sql("backend_pid"))
        if pid == a.get_server_pid():
            return Pooling.DIRECT
        b = await _open(dsn)
        try:
            for _ in range(ROUNDS):
                first = await a.fetchval(sql("backend_pid"))
                other = await b.fetchval(sql("backend_pid"))
                again = await a.fetchval(sql("backend_pid"))
                if first != again or other in (first, again):
                    return Pooling.TRANSACTION
            return Pooling.SESSION
        finally:
            await asyncio.shield(b.close(timeout=5))
    finally:
        await asyncio.shield(a.close(timeout=5))
