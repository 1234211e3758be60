"""`Database`: the one root of everything a node holds open on PostgreSQL.

It owns, for one database: where it is (DL_DB_DSN, or the embedded server it starts), the asyncpg
pool (the engine's, or the HTTP API's bounded one), the pool the workers run on behind a pooler,
the group commit of single enqueues and the executors in front of them (storage/executor.py), the
SQLAlchemy engine, the session check, the schema check and migrations; and the other shards' own
`Database`s (DL_SHARDS_JSON), opened and closed with it. `App` (the facade) and the node root ask it
for connections and executors; nothing above storage opens a connection of its own.

The node's single LISTEN session (`Notifier`, storage/notifier.py: one connection, subscribers per
topic) belongs here too: `Database.notifier`, made on its first subscriber's use (on the session
DSN: LISTEN needs a real session), and closed in `close()` before the pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from dataloader.config import DEFAULT_SHARD, Settings
from dataloader.exceptions import (
    ConfigError,
    DatabaseUnavailable,
    DataloaderError,
    EmbeddedServerFailed,
    SchemaNotReady,
)
from dataloader.model import payload_crypto
from dataloader.storage import migrate, session_probe
from dataloader.storage.console_session_repository import ConsoleSessionRepository
from dataloader.storage.db import create_engine, create_pool, create_sessionmaker, is_connection_error, redact_dsn
from dataloader.storage.embedded import EmbeddedPostgres, EmbeddedServerError
from dataloader.storage.executor import CallersConnection, Executor, GroupCommit, Pooled
from dataloader.storage.insert_group import InsertGroup
from dataloader.storage.notifier import Notifier
from dataloader.storage.queries import sql
from dataloader.storage.repositories import JobRepository
from dataloader.storage.user_repository import UserRepository
from dataloader.storage.workflow_repository import WorkflowRepository

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

# The storage types the facade names in its signatures (it imports nothing else of storage).
__all__ = ["ConsoleSessionRepository", "Database", "JobRepository", "Notifier", "WorkflowRepository", "connect_error"]

log = logging.getLogger("dataloader")

_NOT_OPEN = "the App is not open: await app.open() or use `async with app`"


class Database:
    """One database of a node. `embedded`: start (or join) the embedded server when DL_DB_DSN is
    unset. `api`: the HTTP API's pool beside an engine's (bounded statements, DL_API_POOL_SIZE).
    `process_slots`: the process tasks this node runs at once (the default shard's pool has a
    connection for each; asked at open, when the processors are registered)."""

    def __init__(self, settings: Settings, *, embedded: bool = False, api: bool = False,
                 process_slots: Callable[[], int] = lambda: 0, shard: str = DEFAULT_SHARD,
                 shard_of: Callable[[str], str] | None = None,
                 dsn_names: tuple[str, str] = ("DL_DB_DSN", "DL_DB_DIRECT_DSN")) -> None:
        self.settings = settings
        self.shard = shard
        # Which shard holds a queue: the whole node's rule (a shard's own settings name no shards).
        self.shard_of = shard_of if shard_of is not None else settings.shard_of
        self.api = api
        self.dsn_names = dsn_names
        self._use_embedded = embedded
        self._ring_installed = False
        self._process_slots = process_slots
        self.shards: dict[str, Database] = {}  # the other shards' databases (the default one's only)
        self._embedded: EmbeddedPostgres | None = None
        self._dsn: str | None = None
        # DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN (docs/scaling.md "PgBouncer"): sessions (and the
        # workers' pool, whose control connections hold advisory locks) go there, the rest through
        # the pooler. Without it both are DL_DB_DSN.
        self._session_dsn: str | None = None
        self.pooled = False
        self._pool: asyncpg.Pool | None = None
        self._workers_pool: asyncpg.Pool | None = None
        self._sessions_checked = False
        self._engine: AsyncEngine | None = None
        self._sessionmaker: async_sessionmaker | None = None
        self.insert_group: InsertGroup | None = None
        # Where single enqueues run: the group commit in front of the pool (set by open()).
        self.enqueue_on: Executor
        self._notifier: Notifier | None = None

    @property
    def notifier(self) -> Notifier:
        """The node's one listening session: every NOTIFY this process hears (the workers', the
        duties', the process and workflow callers') comes through it. Probed every 3 fallback polls
        (at least 5 s) while idle: a half-open connection would otherwise leave the node deaf."""
        if self._notifier is None:
            self._notifier = Notifier(self.session_dsn,
                                      check_period=max(self.settings.poll_fallback_sec * 3, 5.0))
        return self._notifier

    # -- opening and closing ------------------------------------------------------------------------

    async def open(self, *, migrate_schema: bool = False) -> Database:
        """Connect (starting the embedded server when asked for), migrate when asked or when the
        embedded server is ours, check the schema, then open every other shard's database."""
        settings = self.settings
        dsn = settings.db_dsn
        if settings.db_direct_dsn and not dsn:
            raise ConfigError("DL_DB_DIRECT_DSN", "is set without DL_DB_DSN: it is the direct path beside a "
                              "pooled DL_DB_DSN (docs/scaling.md)")
        if dsn:
            if not self.api:  # the HTTP API's database is the engine's, said once
                log.info("using external PostgreSQL", extra={"dsn": redact_dsn(dsn)})
        elif self._use_embedded:
            dsn = await self._start_embedded()
        else:
            raise ConfigError("DL_DB_DSN", "is not set: an App needs the database its workers read "
                              "(use App.embedded() for a local development server)")
        self._install_ring()
        direct = settings.db_direct_dsn
        self.pooled = bool(direct) and direct != dsn
        self._session_dsn = direct if self.pooled else dsn
        try:
            try:
                # An embedded server this node started (or joined) is ours: brought to head on open,
                # as `serve` does, so App.embedded() works on a fresh directory.
                if migrate_schema or self._embedded is not None:
                    await self.require_sessions()
                    await migrate.upgrade(self.session_dsn)
                pool = await self._create_pool(dsn)
            except Exception as exc:
                raise connect_error(exc, dsn, self.dsn_names[0]) from exc
            try:
                await self._check_schema(pool, dsn)
            except BaseException as exc:
                await pool.close()
                if _is_pooler_refusal(exc):  # the pool connects lazily: its first connection is here
                    raise connect_error(exc, dsn, self.dsn_names[0]) from exc  # type: ignore[arg-type]
                raise
        except BaseException:
            self._uninstall_ring()
            await self._stop_embedded()
            raise
        self._dsn, self._pool = dsn, pool
        self.insert_group = InsertGroup(dsn, pooled=self.pooled)
        self.enqueue_on = GroupCommit(self.insert_group, Pooled(pool))
        try:
            await self._open_shards(migrate_schema)
        except BaseException:
            await self.close()
            raise
        return self

    def _install_ring(self) -> None:
        """Put DL_ENCRYPTION_KEYS in force before any connection opens: each connection's jsonb
        codec is chosen when it opens (storage/db.py init_connection). Off: nothing installed."""
        keys = self.settings.encryption_keys
        ring = payload_crypto.ring_from_settings(keys.get_secret_value() if keys is not None else None,
                                                 self.settings.encryption_clear_fields)
        if ring is not None and not self._ring_installed:
            payload_crypto.install(ring)
            self._ring_installed = True

    def _uninstall_ring(self) -> None:
        if self._ring_installed:
            self._ring_installed = False
            payload_crypto.uninstall()

    async def _start_embedded(self) -> str:
        self._embedded = EmbeddedPostgres(self.settings.data_dir, os_user=self.settings.embedded_user)
        starting = asyncio.ensure_future(asyncio.to_thread(self._embedded.start))
        try:
            dsn = await asyncio.shield(starting)
        except EmbeddedServerError as exc:
            await self._stop_embedded()
            if exc.setting:
                raise ConfigError("DL_DATA_DIR", exc.problem) from None
            raise EmbeddedServerFailed(exc.problem) from None
        except BaseException:
            # Cancelled (a CLI command's SIGTERM) while the thread starts the server: let the
            # start end, then stop what it started, so no server is left without its owner.
            with contextlib.suppress(BaseException):
                await starting
            await self._stop_embedded()
            raise
        log.info("using embedded PostgreSQL (DL_DB_DSN unset)",
                 extra={"data_dir": str(self._embedded.data_dir), "dsn": dsn})
        return dsn

    async def _open_shards(self, migrate_schema: bool) -> None:
        """Every other shard's database: the same settings, its own pool sized for the workers of
        its queues, its own migrations."""
        settings = self.settings
        for name, shard in settings.shards_json.items():
            self.shards[name] = Database(
                settings.model_copy(update={
                    "db_dsn": shard.dsn, "db_direct_dsn": shard.direct_dsn, "shards_json": {},
                    "workers": [w for w in settings.workers if self.shard_of(w.queue) == name]}),
                api=self.api, shard=name, shard_of=self.shard_of,
                dsn_names=(f"DL_SHARDS_JSON[{name}].dsn", f"DL_SHARDS_JSON[{name}].direct_dsn"))
            await self.shards[name].open(migrate_schema=migrate_schema)

    def _own_concurrency(self) -> int:
        """The job slots this database's pool serves: its queues' workers (and, on the default
        shard, the process tasks: processes live there)."""
        own = sum(w.concurrency for w in self.settings.workers if self.shard_of(w.queue) == self.shard)
        return own + (self._process_slots() if self.shard == DEFAULT_SHARD else 0)

    async def _create_pool(self, dsn: str) -> asyncpg.Pool:
        settings = self.settings
        if not self.api:
            return await create_pool(dsn, max_size=self._own_concurrency() + settings.db_pool_extra,
                                     pooled=self.pooled)
        if self.pooled:  # PgBouncer's query_timeout bounds the statements there (docs/scaling.md)
            return await create_pool(dsn, max_size=settings.api_pool_size, pooled=True)
        # PostgreSQL itself bounds every statement of a request (so a query whose client left, or
        # that the event loop can no longer cancel, still ends), and checks while a statement runs
        # that its client is still there (a cancelled request's connection is closed).
        return await create_pool(dsn, max_size=settings.api_pool_size, server_settings={
            "statement_timeout": str(max(1, round(settings.api_statement_timeout_sec * 1000))),
            "client_connection_check_interval": "1000",
        })

    async def close(self, *, locks_held: bool = False) -> None:
        """Close the other shards' databases, the group commit and the pools (at once when
        `locks_held`: connections still hold a lock_key that could not be released), the SQLAlchemy
        engine, and stop the embedded server. Closing twice is a no-op."""
        shards, self.shards = self.shards, {}
        for shard in reversed(shards.values()):
            await shard.close(locks_held=locks_held)
        notifier, self._notifier = self._notifier, None
        if notifier is not None:  # before the pools: its subscribers stop hearing first
            await notifier.close()
        insert_group, self.insert_group = self.insert_group, None
        if insert_group is not None:
            await insert_group.close()
        pools = [p for p in (self._workers_pool, self._pool) if p is not None]
        self._workers_pool = self._pool = None
        for pool in pools:
            if locks_held:
                pool.terminate()
            else:
                try:
                    await asyncio.wait_for(pool.close(), timeout=10)
                except TimeoutError:
                    pool.terminate()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = self._sessionmaker = None
        await self._stop_embedded()
        self._uninstall_ring()

    async def _stop_embedded(self) -> None:
        embedded, self._embedded = self._embedded, None
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)

    # -- what it holds ------------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            raise RuntimeError(_NOT_OPEN)
        return self._dsn

    @property
    def session_dsn(self) -> str:
        """Where sessions go (advisory locks, LISTEN, the leader election, migrations):
        DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN, else `dsn`."""
        if self._session_dsn is None:
            raise RuntimeError(_NOT_OPEN)
        return self._session_dsn

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError(_NOT_OPEN)
        return self._pool

    @property
    def embedded(self) -> bool:
        """Whether this database is the embedded server this node started or joined."""
        return self._embedded is not None

    def max_connections(self) -> int:
        """The maximum size of its pool (0 when closed)."""
        return self._pool.get_max_size() if self._pool is not None else 0

    def callers(self, conn: Any) -> Executor | None:
        """The executor of a caller's connection (`enqueue(..., conn=)`): its statements join the
        caller's transaction. None for no connection: the node's own executor then."""
        return None if conn is None else CallersConnection(conn)

    def console_sessions(self) -> ConsoleSessionRepository:
        """The console's sign-in sessions, on the pool."""
        return ConsoleSessionRepository(self.pool)

    def users(self) -> UserRepository:
        """The console's users (migration 0041), on the pool."""
        return UserRepository(self.pool)

    @property
    def sessionmaker(self) -> async_sessionmaker:
        """SQLAlchemy async sessions on the same database (made on first use)."""
        if self._sessionmaker is None:
            self._engine = create_engine(self.session_dsn)  # SQLAlchemy names its prepared statements
            self._sessionmaker = create_sessionmaker(self._engine)
        return self._sessionmaker

    async def workers_pool(self) -> asyncpg.Pool:
        """The pool the workers and duties run on: the database's own, or with a pooled DL_DB_DSN
        one on DL_DB_DIRECT_DSN (a control connection's advisory locks need its session)."""
        if not self.pooled:
            return self.pool
        if self._workers_pool is None:
            try:
                self._workers_pool = await create_pool(
                    self.session_dsn, max_size=self._own_concurrency() + self.settings.db_pool_extra)
            except Exception as exc:
                raise connect_error(exc, self.session_dsn, self.dsn_names[1]) from exc
        return self._workers_pool

    # -- sessions and the schema --------------------------------------------------------------------

    async def require_sessions(self) -> None:
        """ConfigError unless the session DSN gives real sessions (storage/session_probe.py): on a
        transaction-pooling PgBouncer, advisory locks and LISTEN silently stop holding. Asked once,
        before anything relies on a session (migrating, running workers)."""
        if self._sessions_checked or self._embedded is not None:
            return
        dsn = self.session_dsn
        dsn_name, direct_name = self.dsn_names
        try:
            pooling = await session_probe.probe(dsn)
        except Exception as exc:
            raise connect_error(exc, dsn, direct_name if self.pooled else dsn_name) from exc
        if not pooling.has_sessions:
            if self.pooled:
                raise ConfigError(direct_name, "leads through a transaction-pooling pooler too: it must "
                                  "reach PostgreSQL directly (or through session pooling)")
            raise ConfigError(dsn_name, "leads through a transaction-pooling pooler (PgBouncer pool_mode="
                              "transaction), where advisory locks and LISTEN do not hold: set DL_DB_DIRECT_DSN "
                              "to a direct connection for sessions (docs/scaling.md)")
        self._sessions_checked = True

    async def migrate(self) -> tuple[str | None, str]:
        """Bring the schema to head (every other shard's first); the (revision before, revision
        after) of this database."""
        for shard in self.shards.values():
            await shard.migrate()
        await self.require_sessions()
        return await migrate.upgrade(self.session_dsn)

    async def _check_schema(self, pool: asyncpg.Pool, dsn: str) -> None:
        try:
            revision = await pool.fetchval(sql("schema_revision"))
        except asyncpg.exceptions.UndefinedTableError:
            revision = None
        if revision is None:
            raise SchemaNotReady(f"the database has no dataloader schema: {self._upgrade_hint(dsn)}")
        head = migrate.head_revision()
        if revision != head:
            log.warning("database schema is not at this code's revision", extra={
                "schema_revision": revision, "code_revision": head})

    def _upgrade_hint(self, dsn: str) -> str:
        """The exact way to migrate the database at `dsn`. A DSN whose host is an embedded server's
        directory (copied from the service's log) names that directory: the embedded server is
        reached through DL_DATA_DIR, and App.embedded() migrates it on open."""
        url = urlsplit(dsn)
        host = parse_qs(url.query).get("host", [""])[0]
        data_dir = next((d for d in (Path(host), Path(host).parent) if host and (d / "PG_VERSION").exists()), None)
        if data_dir is not None and url.path.strip("/") in ("", "postgres"):  # the embedded App's database
            return (f"this is the embedded PostgreSQL of DL_DATA_DIR={data_dir}: run `DL_DATA_DIR={data_dir} "
                    f"dataloader db upgrade` with {self.dsn_names[0]} unset, or open it with "
                    f"App.embedded(data_dir=\"{data_dir}\"), which migrates it")
        return (f"run `dataloader db upgrade` with {self.dsn_names[0]} set to this database "
                "(or App.open(migrate_schema=True))")


def connect_error(exc: Exception, dsn: str, variable: str = "DL_DB_DSN") -> Exception:
    """What a failed first connection means, as a dataloader error: a server that refuses these
    credentials or has no such database is a configuration error (DL_DB_DSN); one that cannot be
    reached is DatabaseUnavailable. Anything else is returned as it is."""
    if isinstance(exc, DataloaderError):
        return exc
    where = redact_dsn(dsn)
    if _is_pooler_refusal(exc):
        # PgBouncer refuses the session settings a dataloader connection starts with: a pooler
        # where a direct connection was expected (docs/scaling.md "PgBouncer").
        return ConfigError(variable, f"{where} leads through PgBouncer ({exc}): keep it as DL_DB_DSN and set "
                           "DL_DB_DIRECT_DSN to a direct connection for sessions (docs/scaling.md)")
    if isinstance(exc, asyncpg.exceptions.InvalidAuthorizationSpecificationError
                  | asyncpg.exceptions.InvalidCatalogNameError):
        return ConfigError(variable, f"{where}: {exc}")
    if is_connection_error(exc):
        return DatabaseUnavailable(f"cannot reach the database at {where}: {exc or type(exc).__name__}")
    return exc


def _is_pooler_refusal(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.exceptions.ProtocolViolationError) and "startup parameter" in str(exc)
