"""Connections: the asyncpg pool the engine runs on and the SQLAlchemy async engine (Alembic, and
the spec's engine/sessionmaker for code that prefers the ORM layer).

SQLAlchemy is imported only by `create_engine`/`create_sessionmaker`: a worker never needs it, and
it is ~20 MB of a worker's memory (tests/unit/test_import_footprint.py keeps it out)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from dataloader.model import payload_crypto
from dataloader.storage.queries import sql

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

# What asyncpg raises for a connection the server closed or that can no longer be used, in every
# state (seen with real restarts: idle in the pool, mid-query, mid-transaction, mid-cancel):
# - socket level: OSError/ConnectionError (refused, reset), TimeoutError (an OSError) while connecting;
# - server said so: class 08 (PostgresConnectionError, incl. ConnectionDoesNotExistError "closed in
#   the middle of operation"), 57P01-57P03 (admin/crash shutdown, "cannot connect now"), 53300;
# - client side: InterfaceError ("connection is closed", "released back to the pool") and
#   InternalClientError ("cannot switch to state N; another operation is in progress": the
#   protocol lost track of an operation that was cut off by the restart). A session that ended
#   while its connection was idle is SessionEnded instead (GuardedConnection tells them apart), and
#   the queue worker's control connection never sees either: storage/owned_connection.py.
# Not connection errors although InterfaceError subclasses: a value the driver cannot encode
# (DataError), a bad client option, a missing feature. Those are the caller's input or a bug.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)
NOT_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions._base.DataError,
    asyncpg.exceptions.ClientConfigurationError,
    asyncpg.exceptions.UnsupportedClientFeatureError,
    asyncpg.exceptions.UnsupportedServerFeatureError,
)


class SessionEnded(ConnectionError):
    """A connection's session ended (the server terminated it): use a new connection. A
    ConnectionError, so `is_connection_error` counts it as weather."""


# How long GuardedConnection waits for a connection whose protocol is stuck in another operation
# to close by itself (a session ended while idle), in checks of this many seconds.
SESSION_END_CHECKS = 20
SESSION_END_CHECK_SEC = 0.005


def is_connection_error(exc: BaseException) -> bool:
    """True when `exc` means "the database cannot be used right now" (retry later), not "this
    statement or value is wrong"."""
    return isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, NOT_CONNECTION_ERRORS)


class GuardedConnection(asyncpg.Connection):
    """A connection that closes itself when an operation leaves its protocol state unknown.

    After a restart, an operation cut off mid-way (the server died, or a timeout cancelled the
    query while the cancel request could not reach the server) can leave asyncpg's protocol
    believing that operation is still in progress. Every later use of that connection then fails
    with InternalClientError. The pool's release does not notice (our reset is a no-op to save a
    round trip), so without this the broken connection would go back to the pool and fail the
    next, unrelated caller. Terminating it here makes the pool open a fresh one instead.
    """

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().execute(*args, **kwargs))

    async def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().executemany(*args, **kwargs))

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().fetch(*args, **kwargs))

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().fetchrow(*args, **kwargs))

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().fetchval(*args, **kwargs))

    async def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        return await self._guard(super().fetchmany(*args, **kwargs))

    async def _guard(self, operation: Awaitable[Any]) -> Any:
        try:
            return await operation
        except asyncpg.exceptions.InternalClientError as exc:
            if "another operation" in str(exc) and await self._ends_by_itself():
                # (not chained: asyncpg's words would read as two operations on one connection)
                raise SessionEnded(f"the session ended while the connection was idle (the server's FATAL "
                                   f"error came before its socket closed; asyncpg: {str(exc).split(';')[0]})"
                                   ) from None
            if not self.is_closed():
                self.terminate()
            raise
        except BaseException as exc:
            cut_off = isinstance(exc, asyncio.CancelledError | TimeoutError)
            if (cut_off or is_connection_error(exc)) and not self.is_closed():
                self.terminate()
            raise

    async def _ends_by_itself(self) -> bool:
        """Whether the socket closes within a moment. A session the server terminates while the
        connection is idle sends its FATAL error, then closes: a statement sent in between is
        refused with "another operation (2) is in progress" (asyncpg's protocol is still consuming
        that unsolicited error). That is a lost session, not two operations on one connection;
        only a connection that stays open after it would be the latter (and is terminated)."""
        for _ in range(SESSION_END_CHECKS):
            if self.is_closed():
                return True
            await asyncio.sleep(SESSION_END_CHECK_SEC)
        return self.is_closed()


def asyncpg_dsn(dsn: str) -> str:
    """Accept both `postgresql://` and SQLAlchemy-style `postgresql+asyncpg://` DSNs."""
    parts = urlsplit(dsn)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"DSN scheme must be postgresql://, got {parts.scheme!r}")
    return urlunsplit(("postgresql", *parts[1:]))


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for logs."""
    parts = urlsplit(dsn)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit((parts.scheme, netloc, *parts[2:]))
    return dsn


# timestamptz travels as microseconds since 2000-01-01 UTC (asyncpg's "tuple" format). PostgreSQL
# holds values Python's datetime cannot (+-infinity, 294276 AD, 4713 BC): asyncpg's own codec
# raises on those, so one odd row would break every read that touches it (status, list, metrics,
# the claim). Decoding clamps them to datetime.min/max instead; nothing we write is ever clamped,
# because the edges refuse times outside dataloader.jobs.manager.AVAILABLE_AT_RANGE.
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MIN_TIME = datetime.min.replace(tzinfo=UTC)
_MAX_TIME = datetime.max.replace(tzinfo=UTC)
_MIN_US = (_MIN_TIME - _PG_EPOCH) // _MICROSECOND
_MAX_US = (_MAX_TIME - _PG_EPOCH) // _MICROSECOND


def decode_timestamptz(value: tuple[int]) -> datetime:
    microseconds = value[0]
    if microseconds <= _MIN_US:
        return _MIN_TIME
    if microseconds >= _MAX_US:
        return _MAX_TIME
    return _PG_EPOCH + timedelta(microseconds=microseconds)


def parse_timestamptz_text(text: str) -> datetime:
    """A timestamptz that PostgreSQL wrote as JSON text (`to_jsonb(ts)`, e.g. a process's saved
    state), clamped as decode_timestamptz does: 'infinity', '-infinity' and years past 9999 (AD or
    BC) are datetime.max/min instead of a ValueError."""
    if text == "infinity":
        return _MAX_TIME
    if text == "-infinity":
        return _MIN_TIME
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        if text.endswith(" BC"):
            return _MIN_TIME
        if text[:1].isdigit() and text.split("-", 1)[0].isdigit() and len(text.split("-", 1)[0]) > 4:
            return _MAX_TIME
        raise
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def encode_timestamptz(value: datetime) -> tuple[int]:
    # A naive datetime is local time, as with asyncpg's own codec.
    return ((value.astimezone(UTC) - _PG_EPOCH) // _MICROSECOND,)


async def init_connection(conn: asyncpg.Connection) -> None:
    """jsonb and json columns arrive as Python objects and are sent from them; timestamptz
    decodes every value the column can hold (see decode_timestamptz). With DL_ENCRYPTION_KEYS in
    force, jsonb decodes through the key ring, which opens every payload envelope it reads
    (model/payload_crypto.py); without, the plain decoder: nothing more per value."""
    ring = payload_crypto.active()
    decoder = json.loads if ring is None else ring.decode
    for type_name in ("jsonb", "json"):
        await conn.set_type_codec(type_name, encoder=json.dumps, decoder=decoder, schema="pg_catalog")
    await conn.set_type_codec("timestamptz", encoder=encode_timestamptz, decoder=decode_timestamptz,
                              schema="pg_catalog", format="tuple")


# Plans that cannot flip with the moment a session was opened. A prepared statement's
# cached generic plan is built once (at its sixth run) from the table's size and statistics of that
# moment: built while dl_jobs is empty (a new database, a drained queue after ANALYZE) it may read
# dl_jobs whole for every claim, finish and heartbeat once a burst arrives (one claim of 16 past
# 20 s at 20,000 queued), and nothing bounds when autovacuum's ANALYZE replaces it. Re-planning
# every call (plan_cache_mode = force_custom_plan) costs about twice the database CPU per job
# (bench/README "Plans that cannot flip"). Instead, three layers:
# - sequential scans are off, and every hot statement names the rows it touches in an index
#   condition (`job_id = ANY(...)`, a key), so even a plan made for an empty table reaches rows
#   through an index: a stale plan costs O(rows walked by one index), never O(table x candidates);
# - the queue worker prepares its statements anew when dl_jobs has outgrown the size their plans
#   were made for (storage/plan_epoch.py, fed by the claim);
# - no cached statement lives longer than STATEMENT_LIFETIME_SEC, which bounds how long any other
#   plan can be stale (re-preparing costs five custom plans per statement per period: nothing).
# Statements that mean to read a table whole turn sequential scans back on in their own
# transaction (search/custom_plans.sql). tests/storage/test_plan_stability.py holds the hot
# statements to this.
# JIT is off: no statement of a job queue runs long enough to gain from compiling it, and before
# PostgreSQL 18 a disabled scan adds 1e10 to a plan's cost, far past jit_above_cost, so a node
# heartbeat that runs in 0.3 ms spent 1.4 s compiling (tests/observers caught it).
SESSION_SETTINGS: dict[str, str] = {"enable_seqscan": "off", "jit": "off"}
STATEMENT_LIFETIME_SEC = 30.0
# asyncpg prepares and caches a statement only up to this many bytes of text (its default is 15 KiB).
# The claim and step statements carry their reasons as comments: the one-statement step grew to
# 16.4 KiB and, no longer cached, was parsed and planned again on every call (PostgreSQL's CPU per
# job doubled, the drain halved). tests/unit/test_statement_size.py keeps every statement under it.
MAX_CACHEABLE_STATEMENT_BYTES = 64 * 1024


def _with_session_settings(kwargs: dict[str, Any], pooled: bool = False) -> dict[str, Any]:
    if pooled:
        return _through_pooler(kwargs)
    kwargs["server_settings"] = {**SESSION_SETTINGS, **(kwargs.get("server_settings") or {})}
    kwargs.setdefault("max_cached_statement_lifetime", STATEMENT_LIFETIME_SEC)
    kwargs.setdefault("max_cacheable_statement_size", MAX_CACHEABLE_STATEMENT_BYTES)
    return kwargs


# A connection through a transaction-pooling PgBouncer (DL_DB_DSN when DL_DB_DIRECT_DSN is set;
# docs/scaling.md "PgBouncer") gets another server session for every transaction, so:
# - no named prepared statements (pgbouncer 1.18 cannot route them: "prepared statement
#   __asyncpg_stmt_6__ does not exist"): asyncpg's unnamed statement of each call is parsed, bound
#   and run in one exchange on one server. Each call is then planned with its real values, so
#   the stale generic plans SESSION_SETTINGS guard against cannot happen on these connections;
# - no settings in the start-up packet: PgBouncer refuses every parameter it does not track
#   ("unsupported startup parameter: enable_seqscan"), and a SET would stay on whichever server
#   session it ran on. The API's statement bound is PgBouncer's `query_timeout` there.
def _through_pooler(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.pop("server_settings", None)
    kwargs.pop("max_cached_statement_lifetime", None)
    kwargs["statement_cache_size"] = 0
    return kwargs


async def ping(conn: asyncpg.Connection) -> None:
    """A round trip on `conn` (listener_ping.sql): a half-open connection never answers it."""
    await conn.fetchval(sql("listener_ping"))


async def connect(dsn: str, *, pooled: bool = False, **kwargs: Any) -> asyncpg.Connection:
    """A connection of our own; `pooled`: `dsn` leads through a transaction-pooling PgBouncer."""
    kwargs.setdefault("connection_class", GuardedConnection)
    conn = await asyncpg.connect(asyncpg_dsn(dsn), **_with_session_settings(kwargs, pooled))
    await init_connection(conn)
    return conn


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset query (one more round trip per release). Nothing in
    dataloader leaves session state on a pooled connection: no LISTEN (the listener has its own
    connection), no SET, and a connection that may still hold an advisory lock is terminated,
    never released. An open transaction is still rolled back by the pool."""


async def create_pool(dsn: str, *, min_size: int = 0, max_size: int = 10, pooled: bool = False,
                      **kwargs: Any) -> asyncpg.Pool:
    """The pool; `pooled`: `dsn` leads through a transaction-pooling PgBouncer (see _through_pooler)."""
    return await asyncpg.create_pool(
        asyncpg_dsn(dsn),
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        reset=_keep_session,
        connection_class=GuardedConnection,
        # A connection idle for a while is closed so a stopped service holds few sessions.
        max_inactive_connection_lifetime=60.0,
        **_with_session_settings(kwargs, pooled),
    )


def create_engine(dsn: str) -> AsyncEngine:
    """SQLAlchemy async engine over asyncpg; connections come from asyncpg.connect so every DSN form
    asyncpg understands (unix sockets via ?host=) works unchanged."""
    from sqlalchemy.ext.asyncio import create_async_engine

    raw = asyncpg_dsn(dsn)
    creator: Callable[[], Any] = lambda: asyncpg.connect(raw)  # noqa: E731
    return create_async_engine("postgresql+asyncpg://", async_creator=creator, pool_pre_ping=True)


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    return async_sessionmaker(engine, expire_on_commit=False)
