"""`App`: the one object that wires dataloader — settings, the database (external, or the embedded
server when asked for), the pool, the pipeline registry and the services. The CLI, the HTTP
service, the tests and `bench/` all start from it, and so does user code:

    app = App(Settings(db_dsn="postgresql://…"))
    async with app:
        job = await app.enqueue("load.cbr", {"rows": 10}, queue="load", lock_key="cbr")
        async with app.running(queues=[Queue("load", concurrency=4)]):
            ...

A library App without a DSN is an error, never a private database: a producer whose DSN is missing
would otherwise enqueue into a database no worker reads. `App.embedded()` (and the `serve` and
`worker` commands) start the embedded PostgreSQL explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
from typing_extensions import Unpack

from dataloader import node
from dataloader.config import DEFAULT_SHARD, Queue, Settings, load_settings, validated_shards
from dataloader.exceptions import (
    ConfigError,
    DatabaseUnavailable,
    DataloaderError,
    EmbeddedServerFailed,
    SchemaNotReady,
    ValidationFailed,
)
from dataloader.flow.manager import FlowManager
from dataloader.flow.shards import ShardedFlowManager
from dataloader.health.reader import HealthReader
from dataloader.jobs.enqueue import EnqueueOptions, batch_items, enqueue_request
from dataloader.jobs.manager import JobManager, JobRequest
from dataloader.jobs.search import ExpensiveQueries, JobSearch, SearchPage
from dataloader.jobs.shards import ShardedJobManager, merge_search_pages
from dataloader.logger import ensure_visible
from dataloader.model.flow import QueueFlow, QueueScaling, QueueSettingsChanges, TaskSettingsChanges
from dataloader.model.ids import new_id
from dataloader.model.job import FINISHED_STATUS_NAMES, Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.model.job_filter import JobFilter
from dataloader.model.queue_depth import QueueDepth
from dataloader.observers.manager import ObserverManager
from dataloader.observers.registry import observers as observer_kinds
from dataloader.operations.manager import OperationManager
from dataloader.operations.shards import ShardedOperationManager
from dataloader.processes.manager import ProcessManager
from dataloader.processes.registry import processors
from dataloader.processes.waiter import TaskWaiter
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import PruneReport, prune
from dataloader.retention.rollup import read_errors, read_stats, rollup
from dataloader.schedules.manager import ScheduleManager
from dataloader.storage import migrate, session_probe
from dataloader.storage.console_session_repository import ConsoleSessionRepository
from dataloader.storage.db import create_engine, create_pool, create_sessionmaker, is_connection_error, redact_dsn
from dataloader.storage.embedded import EmbeddedPostgres, EmbeddedServerError
from dataloader.storage.executor import CallersConnection, GroupCommit, Pooled
from dataloader.storage.flow_repository import FlowRepository
from dataloader.storage.health_repository import HealthRepository
from dataloader.storage.insert_group import InsertGroup
from dataloader.storage.observer_repository import NodeRepository, ObserverRepository
from dataloader.storage.operation_repository import OperationRepository
from dataloader.storage.process_repository import ProcessRepository
from dataloader.storage.repositories import JobRepository
from dataloader.storage.schedule_repository import ScheduleRepository
from dataloader.storage.search_repository import SearchRepository
from dataloader.workers.manager import WorkerManager
from dataloader.workers.pipelines.registry import PipelineRegistry, load_pipeline_modules, registry

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

log = logging.getLogger("dataloader")


class App:
    def __init__(self, settings: Settings | None = None, *, pipelines: PipelineRegistry | None = None,
                 embedded: bool = False, shards: Mapping[str, Any] | None = None) -> None:
        """No I/O here; `await app.open()` (or `async with app`) connects. `settings` default to
        the environment (DL_* and WORKERS_JSON). `shards`: more databases holding some queues, as
        DL_SHARDS_JSON's object (docs/scaling.md "Past one primary"); replaces the settings' own."""
        self.settings = settings if settings is not None else load_settings()
        if shards is not None:
            self.settings = self.settings.model_copy(
                update={"shards_json": validated_shards(shards, self.settings.db_dsn)})
        # Every shard but the default is an App of its own on its database (opened, run and closed
        # with this one); this App is the default shard. Empty with one database.
        self._shards: dict[str, App] = {}
        self._shard_name = DEFAULT_SHARD
        self._shard_of = self.settings.shard_of
        self._dsn_names = ("DL_DB_DSN", "DL_DB_DIRECT_DSN")
        self.registry = pipelines if pipelines is not None else registry
        self._use_embedded = embedded
        self._embedded: EmbeddedPostgres | None = None
        self._dsn: str | None = None
        self._pool: asyncpg.Pool | None = None
        # DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN (docs/scaling.md "PgBouncer"): sessions (and the
        # engine's pool, whose control connections hold advisory locks) go there, the rest through
        # the pooler. Without it both are DL_DB_DSN.
        self._session_dsn: str | None = None
        self._pooled = False
        self._engine_pool: asyncpg.Pool | None = None
        self._sessions_checked = False
        self._insert_group: InsertGroup | None = None
        self._engine: AsyncEngine | None = None
        self._sessionmaker: async_sessionmaker | None = None
        self._managers: list[WorkerManager] = []
        # Set on the App that serves HTTP requests next to an engine App (`api_app`): its own pool,
        # bounded statements, and the engine App's workers as the queues served here.
        self._engine_app: App | None = None
        self._expensive: ExpensiveQueries | None = None
        self._schedules: ScheduleManager | None = None
        self._observers: ObserverManager | None = None
        self._processes: ProcessManager | None = None
        self._health: HealthReader | None = None
        self.repo: JobRepository
        self.jobs: JobManager

    @classmethod
    def embedded(cls, settings: Settings | None = None, *, data_dir: str | Path | None = None,
                 pipelines: PipelineRegistry | None = None) -> App:
        """An App on the embedded PostgreSQL (started on open, in `data_dir` or DL_DATA_DIR, or
        joined when a service already runs it there) when DL_DB_DSN is unset, migrated on open (it
        is ours); with a DSN it uses that server like any App."""
        settings = settings if settings is not None else load_settings()
        if data_dir is not None:
            settings = settings.model_copy(update={"data_dir": Path(data_dir)})
        return cls(settings, pipelines=pipelines, embedded=True)

    async def open(self, *, migrate_schema: bool = False) -> App:
        """Connect. With `migrate_schema` (or on the embedded server of App.embedded()), bring the
        schema to head first (the service commands do); otherwise a database that was never
        migrated is a clear error that says how to migrate it."""
        settings = self.settings
        dsn = settings.db_dsn
        if settings.db_direct_dsn and not dsn:
            raise ConfigError("DL_DB_DIRECT_DSN", "is set without DL_DB_DSN: it is the direct path beside a "
                              "pooled DL_DB_DSN (docs/scaling.md)")
        if dsn:
            if self._engine_app is None:  # the HTTP API's App is on the engine App's database, said once
                log.info("using external PostgreSQL", extra={"dsn": redact_dsn(dsn)})
        elif self._use_embedded:
            self._embedded = EmbeddedPostgres(settings.data_dir, os_user=settings.embedded_user)
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
        else:
            raise ConfigError("DL_DB_DSN", "is not set: an App needs the database its workers read "
                              "(use App.embedded() for a local development server)")
        direct = settings.db_direct_dsn
        self._pooled = bool(direct) and direct != dsn
        self._session_dsn = direct if self._pooled else dsn
        try:
            load_pipeline_modules(settings.pipeline_module_names)
            node.register_node_pipelines(self.registry)
            try:
                # An embedded server this App started (or joined) is ours: brought to head on open,
                # as `serve` does, so App.embedded() works on a fresh directory.
                if migrate_schema or self._embedded is not None:
                    await self._require_sessions()
                    await migrate.upgrade(self.session_dsn)
                pool = await self._create_pool(dsn)
            except Exception as exc:
                raise _connect_error(exc, dsn, self._dsn_names[0]) from exc
            try:
                await self._check_schema(pool, dsn)
            except BaseException as exc:
                await pool.close()
                if _is_pooler_refusal(exc):  # the pool connects lazily: its first connection is here
                    raise _connect_error(exc, dsn, self._dsn_names[0]) from exc  # type: ignore[arg-type]
                raise
        except BaseException:
            await self._stop_embedded()
            raise
        self._dsn, self._pool = dsn, pool
        self._insert_group = InsertGroup(dsn, pooled=self._pooled)
        self.repo = JobRepository(GroupCommit(self._insert_group, Pooled(pool)))
        self.jobs = JobManager(self.repo, self.registry, default_lease_ttl_sec=settings.default_lease_ttl_sec,
                               max_args_bytes=settings.max_args_bytes, served_queues=self.served_queues)
        if settings.shards_json:
            try:
                await self._open_shards(migrate_schema)
            except BaseException:
                await self.close()
                raise
            self.jobs = ShardedJobManager(  # type: ignore[assignment]
                {DEFAULT_SHARD: self.jobs, **{name: shard.jobs for name, shard in self._shards.items()}},
                self._shard_of)
        return self

    async def _open_shards(self, migrate_schema: bool) -> None:
        """Open an App on every other shard's database: the same settings and pipelines, its own
        pool sized for the workers of its queues, its own migrations."""
        settings = self.settings
        for name, shard in settings.shards_json.items():
            child = App(settings.model_copy(update={
                "db_dsn": shard.dsn, "db_direct_dsn": shard.direct_dsn, "shards_json": {},
                "workers": [w for w in settings.workers if self._shard_of(w.queue) == name]}),
                pipelines=self.registry)
            child._shard_name, child._shard_of = name, self._shard_of
            child._dsn_names = (f"DL_SHARDS_JSON[{name}].dsn", f"DL_SHARDS_JSON[{name}].direct_dsn")
            if self._engine_app is not None:
                child._engine_app = self._engine_app._shards[name]
            self._shards[name] = child
            await child.open(migrate_schema=migrate_schema)

    def _shard_apps(self) -> list[App]:
        """This App (the default shard) and every other shard's, in DL_SHARDS_JSON's order."""
        return [self, *self._shards.values()]

    def shard_of(self, queue: str) -> str:
        """The name of the shard that holds `queue` (`default` unless DL_SHARDS_JSON names it)."""
        return self._shard_of(queue)

    def _shard_app(self, queue: str) -> App:
        return self._shards.get(self._shard_of(queue), self)

    def _own_concurrency(self) -> int:
        """The job slots this shard's pool serves: its queues' workers (and, on the default shard,
        the registered processors': processes live there)."""
        own = sum(w.concurrency for w in self.settings.workers if self._shard_of(w.queue) == self._shard_name)
        return own + (node.process_concurrency() if self._shard_name == DEFAULT_SHARD else 0)

    async def _create_pool(self, dsn: str) -> asyncpg.Pool:
        settings = self.settings
        if self._engine_app is None:
            return await create_pool(dsn, max_size=self._own_concurrency() + settings.db_pool_extra,
                                     pooled=self._pooled)
        if self._pooled:  # PgBouncer's query_timeout bounds the statements there (docs/scaling.md)
            return await create_pool(dsn, max_size=settings.api_pool_size, pooled=True)
        # PostgreSQL itself bounds every statement of a request (so a query whose client left, or
        # that the event loop can no longer cancel, still ends), and checks while a statement runs
        # that its client is still there (a cancelled request's connection is closed).
        return await create_pool(dsn, max_size=settings.api_pool_size, server_settings={
            "statement_timeout": str(max(1, round(settings.api_statement_timeout_sec * 1000))),
            "client_connection_check_interval": "1000",
        })

    async def api_app(self) -> App:
        """An open App for serving HTTP requests next to this one (`dataloader serve`): the same
        database, settings and pipelines, but its own pool of DL_API_POOL_SIZE connections whose
        statements end after DL_API_STATEMENT_TIMEOUT_SEC, and at most DL_API_MAX_EXPENSIVE_QUERIES
        searches and counts at once. So no request, however slow, can make the engine's claims,
        heartbeats or duties wait for a connection. Close it before this App."""
        api = App(self.settings.model_copy(update={"db_dsn": self.dsn}), pipelines=self.registry)
        api._engine_app = self
        api._expensive = ExpensiveQueries(self.settings.api_max_expensive_queries)
        return await api.open()

    async def _require_sessions(self) -> None:
        """ConfigError unless the session DSN gives real sessions (storage/session_probe.py): on a
        transaction-pooling PgBouncer, advisory locks and LISTEN silently stop holding. Asked once
        per App, before anything relies on a session (migrating, running workers)."""
        if self._sessions_checked or self._embedded is not None:
            return
        dsn = self.session_dsn
        dsn_name, direct_name = self._dsn_names
        try:
            pooling = await session_probe.probe(dsn)
        except Exception as exc:
            raise _connect_error(exc, dsn, direct_name if self._pooled else dsn_name) from exc
        if not pooling.has_sessions:
            if self._pooled:
                raise ConfigError(direct_name, "leads through a transaction-pooling pooler too: it must "
                                  "reach PostgreSQL directly (or through session pooling)")
            raise ConfigError(dsn_name, "leads through a transaction-pooling pooler (PgBouncer pool_mode="
                              "transaction), where advisory locks and LISTEN do not hold: set DL_DB_DIRECT_DSN "
                              "to a direct connection for sessions (docs/scaling.md)")
        self._sessions_checked = True

    async def _engine_pool_for_workers(self) -> asyncpg.Pool:
        """The pool the workers and duties run on: the App's own, or with a pooled DL_DB_DSN one on
        DL_DB_DIRECT_DSN (a control connection's advisory locks need its session)."""
        if not self._pooled:
            return self.pool
        if self._engine_pool is None:
            try:
                self._engine_pool = await create_pool(self.session_dsn,
                                                      max_size=self._own_concurrency() + self.settings.db_pool_extra)
            except Exception as exc:
                raise _connect_error(exc, self.session_dsn, self._dsn_names[1]) from exc
        return self._engine_pool

    async def _check_schema(self, pool: asyncpg.Pool, dsn: str) -> None:
        revision = await JobRepository(pool).schema_revision()
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
                    f"dataloader db upgrade` with {self._dsn_names[0]} unset, or open it with "
                    f"App.embedded(data_dir=\"{data_dir}\"), which migrates it")
        return (f"run `dataloader db upgrade` with {self._dsn_names[0]} set to this database "
                "(or App.open(migrate_schema=True))")

    async def close(self, *, locks_held: bool = False) -> None:
        """Stop in-process workers, close the pool, stop the embedded server. `locks_held`: some
        connections still hold the lock_key of a sync pipeline that could not be interrupted; do
        not wait for them."""
        shards, self._shards = self._shards, {}
        for shard in reversed(shards.values()):
            await shard.close(locks_held=locks_held)
        for manager in list(self._managers):
            await manager.stop()
            locks_held = locks_held or manager.holds_stray_locks
        await self._close_capabilities()
        insert_group, self._insert_group = self._insert_group, None
        if insert_group is not None:
            await insert_group.close()
        pools = [p for p in (self._engine_pool, self._pool) if p is not None]
        self._engine_pool = self._pool = None
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

    async def _stop_embedded(self) -> None:
        embedded, self._embedded = self._embedded, None
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)

    async def __aenter__(self) -> App:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            raise RuntimeError("the App is not open: await app.open() or use `async with app`")
        return self._dsn

    @property
    def session_dsn(self) -> str:
        """Where sessions go (advisory locks, LISTEN, the leader election, migrations):
        DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN, else `dsn`."""
        if self._session_dsn is None:
            raise RuntimeError("the App is not open: await app.open() or use `async with app`")
        return self._session_dsn

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the App is not open: await app.open() or use `async with app`")
        return self._pool

    @property
    def sessionmaker(self) -> async_sessionmaker:
        """SQLAlchemy async sessions on the same database (made on first use)."""
        if self._sessionmaker is None:
            self._engine = create_engine(self.session_dsn)  # SQLAlchemy names its prepared statements
            self._sessionmaker = create_sessionmaker(self._engine)
        return self._sessionmaker

    async def migrate(self) -> tuple[str | None, str]:
        """Bring the schema to head (on every shard); returns the default shard's (revision before,
        revision after)."""
        for shard in self._shards.values():
            await shard.migrate()
        await self._require_sessions()
        return await migrate.upgrade(self.session_dsn)

    # -- producing -------------------------------------------------------------------------------

    async def enqueue(self, task: str, args: Mapping[str, Any] | None = None, *, conn: Any = None,
                      **options: Unpack[EnqueueOptions]) -> Job:
        """Enqueue a job and return it (the existing one for a known `idempotency_key`).

        `lock_key` defaults to the job's own id (no serialization with other jobs). `delay`
        (seconds or a timedelta) and `available_at` are alternatives. `timeout_sec`: each attempt's
        run-time limit (overrides the pipeline's `timeout`; docs/patterns.md "Run-time limits").
        With `conn` (your asyncpg connection, or SQLAlchemy AsyncConnection / AsyncSession), the job is inserted in your
        transaction: it exists if and only if your transaction commits.

        The keyword arguments are `EnqueueOptions` (dataloader/jobs/enqueue.py): queue, lock_key,
        idempotency_key, partition_key, priority, available_at, delay, max_attempts, lease_ttl_sec,
        timeout_sec, then, restartable, unique_for, unique_key.

        Queue patterns (docs/patterns.md): `then` — the stages to run after it succeeds (a chain);
        `restartable` — its `lock_key` is a restart key: a trigger while a job of the key is queued
        updates that job's args and time, while one runs queues exactly one more run after it
        (the Job returned is the one that will run; `created` tells which happened in the HTTP
        API); `unique_for` (seconds or a timedelta) with an optional `unique_key` — at most one job
        of this task, queue and key (default: the args) per window; a repeat returns that job.
        """
        request = enqueue_request(task, args, "enqueue", options)
        result = await self.jobs.trigger(request, producer="python", job_id=new_id(), on=_callers(conn),
                                         lock_key_given=options.get("lock_key") is not None)
        return result.job

    async def enqueue_many(self, jobs: Iterable[JobRequest | Mapping[str, Any]], *, conn: Any = None
                           ) -> list[uuid.UUID]:
        """Enqueue many jobs in one statement (the fast path). Each item is a `JobRequest` or a
        mapping with `enqueue`'s keyword names (`task` required). Returns the ids of the jobs
        inserted, in input order; a known `idempotency_key` is skipped."""
        return await self.jobs.trigger_many(batch_items(jobs), producer="python", on=_callers(conn))

    async def chain(self, chain_or_job_id: uuid.UUID | str) -> Chain:
        """A multi-stage run (docs/patterns.md "Chains and stages"): its jobs oldest first, found by
        the chain's id or the id of any of its jobs."""
        return await self.jobs.chain(_uuid(chain_or_job_id))

    async def get(self, job_id: uuid.UUID | str) -> Job:
        return await self.jobs.get(_uuid(job_id))

    async def list(self, *, queue: str | None = None, task: str | None = None,
                   status: JobStatus | str | Sequence[JobStatus | str] | None = None,
                   created_from: datetime | None = None, created_to: datetime | None = None,
                   cursor: str | None = None, limit: int = 100) -> JobPage:
        """Jobs newest first (without args); `page.next_cursor` gets the next page."""
        statuses = [status] if isinstance(status, str) else list(status) if status is not None else None
        return await self.jobs.list(queue=queue, task=task, statuses=statuses, created_from=created_from,
                                    created_to=created_to, cursor=cursor, limit=limit)

    async def cancel(self, job_id: uuid.UUID | str) -> Job:
        """A queued job is canceled at once; a running one stops at its next chunk."""
        return await self.jobs.cancel(_uuid(job_id))

    async def retry(self, job_id: uuid.UUID | str) -> Job:
        """A failed, canceled or lost job back to the queue with a fresh attempt budget."""
        return await self.jobs.retry(_uuid(job_id))

    async def set_job_priority(self, job_id: uuid.UUID | str, priority: int) -> Job:
        """A queued job's new priority (lower runs first; 0..2^31-1, as `enqueue`'s), journaled as
        `priority_changed` with the old and new value; the same priority again changes nothing.
        JobNotQueued for a running or finished job (only the claim reads priority)."""
        return await self.jobs.set_priority(_uuid(job_id), priority)

    async def delete_job(self, job_id: uuid.UUID | str) -> None:
        """Delete a finished job (succeeded, failed, canceled or lost) with its journal, as a bulk
        delete does; the log line `job deleted` is its audit record. JobNotFinished for a queued or
        running job: cancel it first."""
        await self.jobs.delete(_uuid(job_id))

    async def events(self, job_id: uuid.UUID | str, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        """The job's journal, oldest first."""
        return await self.jobs.events(_uuid(job_id), after_event_id=after, limit=limit)

    def served_queues(self) -> frozenset[str]:
        """Queues whose workers run in this process right now."""
        if self._engine_app is not None:
            return self._engine_app.served_queues()
        own = frozenset(queue for manager in self._managers for queue in manager.queues)
        return own.union(*(shard.served_queues() for shard in self._shards.values()))

    @asynccontextmanager
    async def running(self, queues: Sequence[Queue | str] | None = None, *, reaper: bool = True
                      ) -> AsyncIterator[WorkerManager]:
        """Run workers in this process for the block: the same engine as `dataloader worker`, with
        no signal handlers of its own. `queues` default to the settings' workers. Leaving the block
        stops them gracefully (running jobs stop at their next chunk; unfinished ones go back to
        the queue)."""
        settings = self.settings
        node.check_duty_settings(settings)  # a ConfigError naming the variable, as the CLI reports it
        ensure_visible(settings.log_level, settings.log_format)
        wanted = settings.workers if queues is None else [q if isinstance(q, Queue) else Queue(q) for q in queues]
        if self._shards:
            # Each shard's queues are worked by a node of that shard's App (its own control
            # connections, LISTEN, reaper and duties on its database); this App, the default shard,
            # always runs its node: schedules, processes and observers live there.
            async with contextlib.AsyncExitStack() as stack:
                for name, shard in self._shards.items():
                    theirs = [q for q in wanted if self._shard_of(q.queue) == name]
                    if theirs:
                        await stack.enter_async_context(shard.running(theirs, reaper=reaper))
                mine = [q for q in wanted if self._shard_of(q.queue) == DEFAULT_SHARD]
                async with self._running_here(mine, reaper) as manager:
                    yield manager
            return
        async with self._running_here(wanted, reaper) as manager:
            yield manager

    @asynccontextmanager
    async def _running_here(self, queues: list[Queue], reaper: bool) -> AsyncIterator[WorkerManager]:
        """The node of this App's own database, working `queues`."""
        settings = self.settings.model_copy(update={"workers": queues})
        await self._require_sessions()
        if self._shard_name == DEFAULT_SHARD:
            settings = node.with_process_queues(settings)
        manager = node.build_node(settings, self.session_dsn, await self._engine_pool_for_workers(), self.registry,
                                  reaper=reaper, capabilities=True)
        declared = {q: s for q, s in settings.declared_queue_settings().items()
                    if self._shard_of(q) == self._shard_name}
        await self._own_flow().apply_declared(declared)
        tasks = settings.declared_task_settings(self.registry.declared_task_limits())
        await self._own_flow().apply_declared_tasks({(q, t): s for (q, t), s in tasks.items()
                                                     if self._shard_of(q) == self._shard_name})
        await manager.start()
        self._managers.append(manager)
        try:
            await manager.wait_listening()
            yield manager
        finally:
            self._managers.remove(manager)
            await manager.stop()

    async def work(self, stop: asyncio.Event | None = None, queues: Sequence[Queue | str] | None = None,
                   *, reaper: bool = True) -> None:
        """Run workers until `stop` is set (forever without one; cancel the task to end it)."""
        async with self.running(queues, reaper=reaper):
            await (stop.wait() if stop is not None else asyncio.Event().wait())

    # -- retention and stats (docs/patterns.md "Retention" and "Stats") ---------------------------

    def retention_policy(self) -> RetentionPolicy:
        """The retention ages of the settings (DL_RETENTION_*, per queue DL_RETENTION_QUEUES_JSON)."""
        return RetentionPolicy.from_settings(self.settings)

    async def prune(self, *, older_than: float | timedelta | str | None = None,
                    statuses: Sequence[JobStatus | str] | None = None, queues: Sequence[str] | None = None,
                    dry_run: bool = False, batch_size: int | None = None) -> PruneReport:
        """Delete finished jobs (with their journal rows) now, as the pruner does on its period.
        Without `older_than`, by the configured policy; with it (seconds, a timedelta or "7d"), that
        age for `statuses` (default: every finished status). `dry_run` only counts."""
        if older_than is not None:
            seconds = (older_than.total_seconds() if isinstance(older_than, timedelta)
                       else Settings.duration_seconds(older_than))
            if seconds < 0:
                raise ValueError("older_than must not be negative")
            chosen = [str(JobStatus(s).value) for s in statuses] if statuses else list(FINISHED_STATUS_NAMES)
            bad = sorted(set(chosen) - set(FINISHED_STATUS_NAMES))
            if bad:
                raise ValueError(f"only finished jobs can be pruned, not {bad}")
            policy = RetentionPolicy.uniform(seconds, chosen)
        else:
            policy = self.retention_policy()
            if statuses:
                keep = {str(JobStatus(s).value) for s in statuses}
                policy = RetentionPolicy({k: v for k, v in policy.ages.items() if k in keep},
                                         {q: {k: v for k, v in a.items() if k in keep}
                                          for q, a in policy.queues.items()})
        reports = [await prune(app.pool, policy, batch_size=batch_size or self.settings.retention_batch_size,
                               dry_run=dry_run, queues=queues) for app in self._shard_apps()]
        return reports[0] if len(reports) == 1 else PruneReport.merged(reports)

    async def rollup_stats(self) -> int:
        """Roll up the jobs finished up to now - DL_STATS_LAG_SEC (what the leader does every
        DL_STATS_PERIOD_SEC); returns how many jobs were counted."""
        return sum([await rollup(app.pool, lag_sec=self.settings.stats_lag_sec, keep_sec=self.settings.stats_keep)
                    for app in self._shard_apps()])

    async def stats(self, *, queue: str | None = None, start: datetime | None = None,
                    end: datetime | None = None, hours: float = 24, unrolled: bool = False) -> dict[str, Any]:
        """Per queue and hour: finished counts by status, run and wait time (count, mean, p95,
        max), and the oldest waiting job. Hours from `start` (default: `end - hours`) to `end`
        (default: now), read from the rollup. With `unrolled`, the counts also hold the jobs
        finished since the rollup's watermark (read from dl_jobs, so a job counts the moment it
        finished; their times are not in the timings): the console's overview."""
        end = end or datetime.now(UTC)
        start = start or end - timedelta(hours=hours)
        if start > end:
            raise ValueError("start must not be after end")
        if queue is not None or not self._shards:
            return await read_stats(self._shard_app(queue).pool if queue else self.pool, queue=queue,
                                    start=start, end=end, unrolled=unrolled)
        reports = [await read_stats(app.pool, queue=None, start=start, end=end, unrolled=unrolled)
                   for app in self._shard_apps()]
        merged = dict(reports[0])
        merged["queues"] = sorted((q for r in reports for q in r["queues"]), key=lambda q: q["queue"])
        watermarks = [r["rolled_up_to"] for r in reports if r["rolled_up_to"] is not None]
        merged["rolled_up_to"] = min(watermarks) if len(watermarks) == len(reports) else None
        return merged

    async def stats_errors(self, *, queue: str | None = None, since: datetime | None = None,
                           limit: int = 20) -> dict[str, Any]:
        """Failed and lost jobs grouped by the first line of their error, most frequent first, in the
        hours from `since` (default: the last hour) on."""
        since = since or datetime.now(UTC) - timedelta(hours=1)
        if queue is not None or not self._shards:
            return await read_errors(self._shard_app(queue).pool if queue else self.pool, queue=queue,
                                     since=since, limit=limit)
        reports = [await read_errors(app.pool, queue=None, since=since, limit=limit) for app in self._shard_apps()]
        errors = sorted((e for r in reports for e in r["errors"]), key=lambda e: -e["jobs"])
        return {**reports[0], "errors": errors[:limit]}

    # -- capabilities: one manager each, built on this App's pool -----------------------------------
    # The cached ones are dropped on close(), so an App opened again builds them on the new pool.

    @property
    def schedules(self) -> ScheduleManager:
        """Create, read, list, pause, resume, delete schedules and read their history:
        `await app.schedules.create(app.schedules.spec(name=..., task=..., cron=..., tz=...))`."""
        if self._schedules is None:
            self._schedules = ScheduleManager(ScheduleRepository(self.pool), check_task=self._check_schedule_task)
        return self._schedules

    def _check_schedule_task(self, task: str, queue: str, served: frozenset[str] | None = None) -> None:
        """A schedule's task as an enqueue's; and its queue on the default shard, whose scheduler
        enqueues its ticks into its own database (docs/scaling.md "Past one primary")."""
        shard = self._shard_of(queue)
        if shard != DEFAULT_SHARD:
            raise ValidationFailed(f"queue: {queue!r} lives on shard {shard!r}; schedules live on the default "
                                   "shard and enqueue there (docs/scaling.md)",
                                   [{"loc": ["queue"], "msg": f"lives on shard {shard!r}", "type": "value_error"}])
        self.jobs.check_task(task, queue, served)

    async def search(self, filter: JobFilter | Mapping[str, Any] | None = None, *, cursor: str | None = None,
                     limit: int = 100, count: bool = False) -> SearchPage:
        """Jobs matching `filter` (a JobFilter or a mapping of its fields: queues, tasks, statuses,
        error pattern, created/finished ranges, args_contains, args_path, lock_key_prefix, held),
        newest first; `page.next_cursor` gets the next page, `count=True` also counts them all."""
        if not self._shards:
            return await self._job_search().search(filter, cursor=cursor, limit=limit, count=count)
        async with self._job_search().expensive_slot():  # one slot for the fan-out, as for one shard
            pages = await asyncio.gather(*(app._job_search(limited=False).search(
                filter, cursor=cursor, limit=limit, count=count) for app in self._shard_apps()))
        return merge_search_pages(pages, limit)

    async def count_jobs(self, filter: JobFilter | Mapping[str, Any] | None = None, *,
                         at_most: int | None = None) -> int:
        """How many jobs match `filter` (what a bulk operation's dry run reports); with `at_most`,
        counting stops there (a capped count that stays cheap on a big table)."""
        if at_most is not None and at_most < 1:
            raise ValidationFailed(f"at_most must be at least 1, not {at_most}",
                                   [{"loc": ["at_most"], "msg": "must be at least 1", "type": "value_error"}])
        if not self._shards:
            return await self._job_search().count(filter, at_most=at_most)
        async with self._job_search().expensive_slot():
            counts = await asyncio.gather(*(app._job_search(limited=False).count(filter, at_most=at_most)
                                            for app in self._shard_apps()))
        total = sum(counts)
        return min(total, at_most) if at_most is not None else total

    @property
    def operations(self) -> OperationManager:
        """Tracked bulk operations: `await app.operations.start("requeue", {"statuses": ["failed"],
        "queues": ["load"]}, started_by="alice")`, then get / list / pause / resume / cancel / events
        / wait. The runner of every node's `running()` works them (docs/operations.md)."""
        if not self._shards:
            return self._own_operations()
        return ShardedOperationManager(  # type: ignore[return-value]
            {app._shard_name: app._own_operations() for app in self._shard_apps()}, self._shard_of)

    def _own_operations(self) -> OperationManager:
        return OperationManager(OperationRepository(self.pool, count_timeout_sec=self._count_timeout_sec),
                                self._job_search(), default_batch_size=self.settings.operations_batch_size)

    def _job_search(self, *, limited: bool = True) -> JobSearch:
        return JobSearch(SearchRepository(self.pool, count_timeout_sec=self._count_timeout_sec),
                         self._expensive if limited else None)

    @property
    def _count_timeout_sec(self) -> float | None:
        """Counts of an HTTP request are bounded (DL_API_COUNT_TIMEOUT_SEC); a library caller's are not."""
        return self.settings.api_count_timeout_sec if self._engine_app is not None else None

    @property
    def observers(self) -> ObserverManager:
        """Create, read, list and stop observers (never-ending work, spread over the nodes), and read
        the node registry: `await app.observers.create(app.observers.spec(name=..., kind=..., args=...))`,
        `await app.observers.stop(name, wait=10)`, `await app.observers.nodes()`."""
        if self._observers is None:
            self._observers = ObserverManager(ObserverRepository(self.pool), NodeRepository(self.pool), observer_kinds)
        return self._observers

    @property
    def processes(self) -> ProcessManager:
        """Event-sourced processes: `await app.processes.init("payments", "p-1", {...})`, `call`,
        `repair`, `simple_repair`, `get`, `list`, `remove`. Processors are registered with
        `@processor(ns)`; `running()` serves their queues (`process:<ns>`)."""
        if self._processes is None:
            waiter = TaskWaiter(self.session_dsn, poll_sec=self.settings.poll_fallback_sec)
            self._processes = ProcessManager(
                ProcessRepository(self.pool), processors, waiter, max_args_bytes=self.settings.max_args_bytes,
                default_lease_ttl_sec=self.settings.default_lease_ttl_sec, operations=lambda: self.operations,
                idle_sec=self.settings.process_idle_sec)
        return self._processes

    @property
    def health(self) -> HealthReader:
        """The database's health as it affects the queue, for /metrics (docs/observability.md):
        `snapshot = await app.health.read()`. One reader per App, so its warning about a
        transaction holding the xmin horizon is rate-limited across scrapes."""
        if self._health is None:
            self._health = HealthReader(HealthRepository(self.pool), connections_budget=self.connections_budget,
                                        xmin_warn_sec=self.settings.db_xmin_warn_sec)
        return self._health

    @property
    def console_sessions(self) -> ConsoleSessionRepository:
        """The console's sign-in sessions (ui/auth.py, migration 0028), held by the database so a
        sign-out holds on every node and through restarts."""
        return ConsoleSessionRepository(self.pool)

    def connections_budget(self) -> int:
        """Connections this node may open: the maximum sizes of its pools (the engine's, and the
        API's next to it under `dataloader serve`)."""
        pools = [self._pool, self._engine_app._pool if self._engine_app is not None else None]
        return sum(p.get_max_size() for p in pools if p is not None)

    @property
    def flow(self) -> FlowManager:
        """Flow control's rules (docs/flow-control.md); `pause_queue`, `resume_queue` and `queues`
        are the short forms. With shards, each queue's rules are on its shard."""
        if not self._shards:
            return self._own_flow()
        return ShardedFlowManager(  # type: ignore[return-value]
            {app._shard_name: app._own_flow() for app in self._shard_apps()}, self._shard_of)

    def _own_flow(self) -> FlowManager:
        return FlowManager(FlowRepository(self.pool))

    async def queue_stats(self) -> list[asyncpg.Record]:
        """Jobs by queue and status on every shard (dl_queue_jobs of /metrics)."""
        rows = [await app.repo.queue_stats() for app in self._shard_apps()]
        return [row for shard_rows in rows for row in shard_rows]

    async def pause_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """Pause `queue` on every node, durably: running jobs finish, nothing new starts, enqueue
        still works. When it returns, nothing of the queue starts any more: it waits for the claims
        in flight, and every later claim sees it (docs/flow-control.md). Idempotent. With
        `task`, only that task of the queue pauses; its other tasks run on."""
        return await self.flow.pause(queue, task)

    async def resume_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """Resume `queue` (or one `task` of it) and wake its workers on every node. Idempotent."""
        return await self.flow.resume(queue, task)

    async def configure_queue(self, queue: str, **changes: Unpack[QueueSettingsChanges]) -> QueueFlow:
        """Change `queue`'s limits across every node: `concurrency`, `partition_concurrency`,
        `rate_limit` with `rate_period_sec`, `partition_rate_limit` with `partition_rate_period_sec`
        (docs/flow-control.md). A partial update: a setting not named is kept, an explicit None
        clears it. Runtime settings win over declared ones (`Queue(limits=...)`, DL_QUEUES_JSON) and
        persist. Holds for every claim that starts after this call returns."""
        return await self.flow.configure(queue, changes)

    async def configure_task(self, queue: str, task: str, **changes: Unpack[TaskSettingsChanges]) -> QueueFlow:
        """Change the limits of `task` in `queue` across every node: `concurrency` (its jobs running at
        once), `rate_limit` with `rate_period_sec` (starts per period) — a queue's keys and ranges
        (docs/flow-control.md "Limits per task"). A partial update: a setting not named is kept, None
        clears it. Wins over `@pipeline(limits=...)` and persists. Holds for every claim that
        starts after this call returns. Returns the queue's state (`task_limits` has the task's)."""
        return await self.flow.configure_task(queue, task, changes)

    async def queue_scaling(self, queue: str, *, target_sec: float = 60.0) -> QueueScaling:
        """The autoscaling signal of `queue` (docs/flow-control.md "Autoscaling"): the job slots it
        wants on all nodes now, from its backlog, its oldest job's age, its recent throughput, its
        pause and its concurrency limit, to drain the backlog within `target_sec`; with the inputs."""
        return (await self.flow.scaling(queue, target_sec))[0]

    async def queues(self) -> list[QueueFlow]:
        """Every queue that is paused, has limits, or has queued or running jobs: its flow state,
        limits and use."""
        return await self.flow.list()

    async def queue_depths(self) -> list[QueueDepth]:
        """Every queue with live or held jobs: due (`queued`), `delayed`, `running` and `held` counts,
        and the age of the oldest due job, on all nodes (the console's overview)."""
        return await self.jobs.queue_depths()

    async def _close_capabilities(self) -> None:
        processes, self._processes = self._processes, None
        self._schedules = self._observers = self._health = None
        if processes is not None:
            await processes.waiter.close()


def _connect_error(exc: Exception, dsn: str, variable: str = "DL_DB_DSN") -> Exception:
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


def _uuid(value: uuid.UUID | str) -> uuid.UUID:
    """A job id from a UUID or its text; anything else is the validation_error HTTP gives a bad path."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationFailed(f"job_id: {str(value)[:100]!r} is not a UUID",
                               [{"loc": ["job_id"], "msg": "is not a UUID", "type": "uuid_parsing"}]) from None


def _callers(conn: Any) -> CallersConnection | None:
    """The caller's connection (`conn=`) as the executor its enqueue runs on; None: the App's own."""
    return None if conn is None else CallersConnection(conn)
