"""`App`: the facade of dataloader — the one object user code, the CLI, the HTTP service, the tests
and `bench/` start from:

    app = App(Settings(db_dsn="postgresql://…"))
    async with app:
        job = await app.enqueue("load.cbr", {"rows": 10}, queue="load", lock_key="cbr")
        async with app.running(queues=[Queue("load", concurrency=4)]):
            ...

It holds no wiring of its own: the database root (storage/database.py `Database`: pools, the
embedded server, shards, executors) opens the connections, and the node root (node.py) builds the
managers and the workers on them. Each method here checks a caller's input once and hands it on.

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
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
from typing_extensions import Unpack

from dataloader import node
from dataloader.config import DEFAULT_SHARD, Queue, Settings, load_settings, validated_shards
from dataloader.exceptions import ValidationFailed
from dataloader.flow.manager import FlowManager
from dataloader.flow.shards import ShardedFlowManager
from dataloader.health.reader import HealthReader
from dataloader.jobs.enqueue import EnqueueOptions, batch_items, enqueue_request
from dataloader.jobs.manager import JobManager, JobRequest
from dataloader.jobs.search import ExpensiveQueries, JobSearch, SearchPage
from dataloader.jobs.shards import ShardedJobManager, ShardedSearch, check_schedule_shard
from dataloader.logger import ensure_visible
from dataloader.model.flow import QueueFlow, QueueScaling, QueueSettingsChanges, TaskSettingsChanges
from dataloader.model.ids import job_id_of, new_id
from dataloader.model.job import Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.model.job_filter import JobFilter
from dataloader.model.queue_depth import QueueDepth
from dataloader.observers.manager import ObserverManager
from dataloader.operations.manager import OperationManager
from dataloader.operations.shards import ShardedOperationManager
from dataloader.processes.manager import ProcessManager
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import PruneReport
from dataloader.retention.shards import chosen_policy, errors_shards, prune_shards, rollup_shards, stats_shards
from dataloader.schedules.manager import ScheduleManager
from dataloader.storage.database import ConsoleSessionRepository, Database, JobRepository, WorkflowRepository
from dataloader.workers.manager import WorkerManager
from dataloader.workers.pipelines.registry import PipelineRegistry, load_pipeline_modules, registry
from dataloader.workflows.manager import WorkflowManager
from dataloader.workflows.registry import workflows as workflow_definitions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from dataloader.storage.database import Notifier  # the node's one LISTEN session, owned by the Database

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
        # Every shard but the default is an App of its own over its shard's Database (opened, run and
        # closed with this one); this App is the default shard. Empty with one database.
        self._shards: dict[str, App] = {}
        self._shard_of = self.settings.shard_of
        self.registry = pipelines if pipelines is not None else registry
        self.db = Database(self.settings, embedded=embedded, process_slots=node.process_concurrency)
        self._managers: list[WorkerManager] = []
        # Set on the App that serves HTTP requests next to an engine App (`api_app`): its own pool,
        # bounded statements, and the engine App's workers as the queues served here.
        self._engine_app: App | None = None
        self._expensive: ExpensiveQueries | None = None
        self._schedules: ScheduleManager | None = None
        self._observers: ObserverManager | None = None
        self._processes: ProcessManager | None = None
        self._workflows: WorkflowManager | None = None
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
        load_pipeline_modules(self.settings.pipeline_module_names)
        node.register_node_pipelines(self.registry)
        await self.db.open(migrate_schema=migrate_schema)
        self.repo, self.jobs = node.jobs(self.db, self.registry, self.settings, self.served_queues)
        for name, shard_db in self.db.shards.items():
            shard = self._shards[name] = App(shard_db.settings, pipelines=self.registry)
            shard.db, shard._shard_of = shard_db, self._shard_of
            if self._engine_app is not None:
                shard._engine_app = self._engine_app._shards[name]
            shard.repo, shard.jobs = node.jobs(shard_db, self.registry, shard.settings, shard.served_queues)
        if self._shards:
            self.jobs = ShardedJobManager(  # type: ignore[assignment]
                {DEFAULT_SHARD: self.jobs, **{name: shard.jobs for name, shard in self._shards.items()}},
                self._shard_of)
        return self

    def _shard_apps(self) -> list[App]:
        """This App (the default shard) and every other shard's, in DL_SHARDS_JSON's order."""
        return [self, *self._shards.values()]

    def _pools(self, queue: str | None = None) -> list[asyncpg.Pool]:
        """The pool of `queue`'s shard; without a queue, every shard's."""
        return [self._shard_app(queue).pool] if queue is not None else [app.pool for app in self._shard_apps()]

    def shard_of(self, queue: str) -> str:
        """The name of the shard that holds `queue` (`default` unless DL_SHARDS_JSON names it)."""
        return self._shard_of(queue)

    def _shard_app(self, queue: str) -> App:
        return self._shards.get(self._shard_of(queue), self)

    async def api_app(self) -> App:
        """An open App for serving HTTP requests next to this one (`dataloader serve`): the same
        database, settings and pipelines, but its own pool of DL_API_POOL_SIZE connections whose
        statements end after DL_API_STATEMENT_TIMEOUT_SEC, and at most DL_API_MAX_EXPENSIVE_QUERIES
        searches and counts at once. So no request, however slow, can make the engine's claims,
        heartbeats or duties wait for a connection. Close it before this App."""
        api = App(self.settings.model_copy(update={"db_dsn": self.dsn}), pipelines=self.registry)
        api._engine_app, api.db.api = self, True
        api._expensive = ExpensiveQueries(self.settings.api_max_expensive_queries)
        return await api.open()

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
        await self.db.close(locks_held=locks_held)

    async def __aenter__(self) -> App:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def dsn(self) -> str:
        return self.db.dsn

    @property
    def session_dsn(self) -> str:
        """Where sessions go (advisory locks, LISTEN, the leader election, migrations):
        DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN, else `dsn`."""
        return self.db.session_dsn

    @property
    def pool(self) -> asyncpg.Pool:
        return self.db.pool

    @property
    def notifier(self) -> Notifier:
        """The node's one listening session: every NOTIFY this process hears (the workers', the
        duties', the process callers') comes through it. Started by its first user."""
        if self._engine_app is not None:
            return self._engine_app.notifier
        return self.db.notifier

    @property
    def sessionmaker(self) -> async_sessionmaker:
        """SQLAlchemy async sessions on the same database (made on first use)."""
        return self.db.sessionmaker

    async def migrate(self) -> tuple[str | None, str]:
        """Bring the schema to head (on every shard); returns the default shard's (revision before,
        revision after)."""
        return await self.db.migrate()

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
        result = await self.jobs.trigger(request, producer="python", job_id=new_id(), on=self.db.callers(conn),
                                         lock_key_given=options.get("lock_key") is not None)
        return result.job

    async def enqueue_many(self, jobs: Iterable[JobRequest | Mapping[str, Any]], *, conn: Any = None
                           ) -> list[uuid.UUID]:
        """Enqueue many jobs in one statement (the fast path). Each item is a `JobRequest` or a
        mapping with `enqueue`'s keyword names (`task` required). Returns the ids of the jobs
        inserted, in input order; a known `idempotency_key` is skipped."""
        return await self.jobs.trigger_many(batch_items(jobs), producer="python", on=self.db.callers(conn))

    async def chain(self, chain_or_job_id: uuid.UUID | str) -> Chain:
        """A multi-stage run (docs/patterns.md "Chains and stages"): its jobs oldest first, found by
        the chain's id or the id of any of its jobs."""
        return await self.jobs.chain(job_id_of(chain_or_job_id))

    async def get(self, job_id: uuid.UUID | str) -> Job:
        return await self.jobs.get(job_id_of(job_id))

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
        return await self.jobs.cancel(job_id_of(job_id))

    async def retry(self, job_id: uuid.UUID | str) -> Job:
        """A failed, canceled or lost job back to the queue with a fresh attempt budget."""
        return await self.jobs.retry(job_id_of(job_id))

    async def set_job_priority(self, job_id: uuid.UUID | str, priority: int) -> Job:
        """A queued job's new priority (lower runs first; 0..2^31-1, as `enqueue`'s), journaled as
        `priority_changed` with the old and new value; the same priority again changes nothing.
        JobNotQueued for a running or finished job (only the claim reads priority)."""
        return await self.jobs.set_priority(job_id_of(job_id), priority)

    async def delete_job(self, job_id: uuid.UUID | str) -> None:
        """Delete a finished job (succeeded, failed, canceled or lost) with its journal, as a bulk
        delete does; the log line `job deleted` is its audit record. JobNotFinished for a queued or
        running job: cancel it first."""
        await self.jobs.delete(job_id_of(job_id))

    async def events(self, job_id: uuid.UUID | str, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        """The job's journal, oldest first."""
        return await self.jobs.events(job_id_of(job_id), after_event_id=after, limit=limit)

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

    def _running_here(self, queues: list[Queue], reaper: bool) -> AbstractAsyncContextManager[WorkerManager]:
        """The node of this App's own database, working `queues`."""
        return node.running(self.db, self.settings.model_copy(update={"workers": queues}), self.registry,
                            self._own_flow(), self._managers, reaper=reaper, shard_of=self._shard_of,
                            notifier=self.notifier)

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
        policy = chosen_policy(self.settings, older_than, statuses)
        return await prune_shards(self._pools(), policy, dry_run=dry_run, queues=queues,
                                  batch_size=batch_size or self.settings.retention_batch_size)

    async def rollup_stats(self) -> int:
        """Roll up the jobs finished up to now - DL_STATS_LAG_SEC (what the leader does every
        DL_STATS_PERIOD_SEC); returns how many jobs were counted."""
        return await rollup_shards(self._pools(), self.settings)

    async def stats(self, *, queue: str | None = None, start: datetime | None = None,
                    end: datetime | None = None, hours: float = 24, unrolled: bool = False) -> dict[str, Any]:
        """Per queue and hour: finished counts by status, run and wait time (count, mean, p95,
        max), and the oldest waiting job. Hours from `start` (default: `end - hours`) to `end`
        (default: now), read from the rollup. With `unrolled`, the counts also hold the jobs
        finished since the rollup's watermark (read from dl_jobs, so a job counts the moment it
        finished; their times are not in the timings): the console's overview."""
        end = end or datetime.now(UTC)
        return await stats_shards(self._pools(queue), queue=queue, start=start or end - timedelta(hours=hours),
                                  end=end, unrolled=unrolled)

    async def stats_errors(self, *, queue: str | None = None, since: datetime | None = None,
                           limit: int = 20) -> dict[str, Any]:
        """Failed and lost jobs grouped by the first line of their error, most frequent first, in the
        hours from `since` (default: the last hour) on."""
        since = since or datetime.now(UTC) - timedelta(hours=1)
        return await errors_shards(self._pools(queue), queue=queue, since=since, limit=limit)

    # -- capabilities: one manager each, built on this App's pool -----------------------------------
    # The cached ones are dropped on close(), so an App opened again builds them on the new pool.

    @property
    def schedules(self) -> ScheduleManager:
        """Create, read, list, pause, resume, delete schedules and read their history:
        `await app.schedules.create(app.schedules.spec(name=..., task=..., cron=..., tz=...))`."""
        if self._schedules is None:
            self._schedules = node.schedules(self.db, check_task=self._check_schedule_task)
        return self._schedules

    def _check_schedule_task(self, task: str, queue: str, served: frozenset[str] | None = None) -> None:
        """A schedule's task as an enqueue's; and its queue on the default shard, whose scheduler
        enqueues its ticks into its own database (docs/scaling.md "Past one primary")."""
        check_schedule_shard(queue, self._shard_of, DEFAULT_SHARD)
        self.jobs.check_task(task, queue, served)

    async def search(self, filter: JobFilter | Mapping[str, Any] | None = None, *, cursor: str | None = None,
                     limit: int = 100, count: bool = False) -> SearchPage:
        """Jobs matching `filter` (a JobFilter or a mapping of its fields: queues, tasks, statuses,
        error pattern, created/finished ranges, args_contains, args_path, lock_key_prefix, held),
        newest first; `page.next_cursor` gets the next page, `count=True` also counts them all."""
        return await self._search().search(filter, cursor=cursor, limit=limit, count=count)

    async def count_jobs(self, filter: JobFilter | Mapping[str, Any] | None = None, *,
                         at_most: int | None = None) -> int:
        """How many jobs match `filter` (what a bulk operation's dry run reports); with `at_most`,
        counting stops there (a capped count that stays cheap on a big table)."""
        if at_most is not None and at_most < 1:
            raise ValidationFailed(f"at_most must be at least 1, not {at_most}",
                                   [{"loc": ["at_most"], "msg": "must be at least 1", "type": "value_error"}])
        return await self._search().count(filter, at_most=at_most)

    @property
    def operations(self) -> OperationManager:
        """Tracked bulk operations: `await app.operations.start("requeue", {"statuses": ["failed"],
        "queues": ["load"]}, started_by="alice")`, then get / list / pause / resume / cancel / events
        / wait. The runner of every node's `running()` works them (docs/operations.md)."""
        if not self._shards:
            return self._own_operations()
        return ShardedOperationManager(  # type: ignore[return-value]
            {app.db.shard: app._own_operations() for app in self._shard_apps()}, self._shard_of)

    def _own_operations(self) -> OperationManager:
        return node.operations(self.db, self._job_search(), self._count_timeout_sec)

    def _search(self) -> JobSearch | ShardedSearch:
        """Search and counts: on this database, or on every shard's within one expensive slot."""
        if not self._shards:
            return self._job_search()
        return ShardedSearch(self._job_search(), [app._job_search(limited=False) for app in self._shard_apps()])

    def _job_search(self, *, limited: bool = True) -> JobSearch:
        return node.job_search(self.db, self._expensive if limited else None, self._count_timeout_sec)

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
            self._observers = node.observers(self.db)
        return self._observers

    @property
    def processes(self) -> ProcessManager:
        """Event-sourced processes: `await app.processes.init("payments", "p-1", {...})`, `call`,
        `repair`, `simple_repair`, `get`, `list`, `remove`. Processors are registered with
        `@processor(ns)`; `running()` serves their queues (`process:<ns>`)."""
        if self._processes is None:
            self._processes = node.processes(self.db, operations=lambda: self.operations,
                                           notifier=self.notifier)
        return self._processes

    @property
    def workflows(self) -> WorkflowManager:
        """Durable workflows (docs/workflows.md): `await app.workflows.start("orders.fulfil", order)`,
        `get`, `result`, `signal`, `cancel`. Workflows are registered with `@workflow(name)`; their
        runs are jobs of the workflow's queue."""
        if self._workflows is None:
            self._workflows = WorkflowManager(
                WorkflowRepository(self.pool), self.jobs, workflow_definitions,
                max_args_bytes=self.settings.max_args_bytes, default_lease_ttl_sec=self.settings.default_lease_ttl_sec)
        return self._workflows

    async def signal_workflow(self, run_id: uuid.UUID | str, name: str, payload: Any = None) -> None:
        """Send signal `name` to a workflow run (`app.workflows.signal`)."""
        await self.workflows.signal(run_id, name, payload)

    @property
    def health(self) -> HealthReader:
        """The database's health as it affects the queue, for /metrics (docs/observability.md):
        `snapshot = await app.health.read()`. One reader per App, so its warning about a
        transaction holding the xmin horizon is rate-limited across scrapes."""
        if self._health is None:
            self._health = node.health(self.db, self.connections_budget)
        return self._health

    @property
    def console_sessions(self) -> ConsoleSessionRepository:
        """The console's sign-in sessions (ui/auth.py, migration 0028), held by the database so a
        sign-out holds on every node and through restarts."""
        return self.db.console_sessions()

    def connections_budget(self) -> int:
        """Connections this node may open: the maximum sizes of its pools (the engine's, and the
        API's next to it under `dataloader serve`)."""
        engine = self._engine_app.db.max_connections() if self._engine_app is not None else 0
        return self.db.max_connections() + engine

    @property
    def flow(self) -> FlowManager:
        """Flow control's rules (docs/flow-control.md); `pause_queue`, `resume_queue` and `queues`
        are the short forms. With shards, each queue's rules are on its shard."""
        if not self._shards:
            return self._own_flow()
        return ShardedFlowManager(  # type: ignore[return-value]
            {app.db.shard: app._own_flow() for app in self._shard_apps()}, self._shard_of)

    def _own_flow(self) -> FlowManager:
        return node.flow(self.db)

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
