"""`Managers`: the capabilities of a node as `App` hands them out, over its database root.

One `Managers` per database (storage/database.py `Database`): the job repository and manager, the
managers of schedules, search, bulk operations, observers, processes, workflows, health and flow
control, and the nodes (node.py `running`) working its queues in this process. The default shard's
holds every other shard's (DL_SHARDS_JSON, docs/scaling.md "Past one primary") and composes them:
a job, an operation, a search or a queue's rules go to the shard of its queue; schedules,
processes, observers and workflows live on the default shard.

The managers that hold state are built on first use; schedules, observers, processes and health
(and the waiter processes share with workflows' `result`) are dropped on `stop()`, so an App opened
again builds them on its new pool (the workflows' manager is not: it is built once per App, and asks
for the waiter of the moment). The others hold nothing and are made per use. `App` only hands these
out; the wiring is here and in node.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import asyncpg

from dataloader import node
from dataloader.audit.trail import AuditTrail
from dataloader.config import DEFAULT_SHARD, Queue, Settings
from dataloader.encryption.keys import KeyManager
from dataloader.flow.manager import FlowManager
from dataloader.flow.shards import ShardedFlowManager
from dataloader.health.reader import HealthReader
from dataloader.jobs.manager import JobManager
from dataloader.jobs.search import ExpensiveQueries, JobSearch
from dataloader.jobs.shards import ShardedJobManager, ShardedSearch, check_schedule_shard
from dataloader.logger import ensure_visible
from dataloader.observers.manager import ObserverManager
from dataloader.observers.registry import observers as observer_kinds
from dataloader.operations.manager import OperationManager
from dataloader.operations.shards import ShardedOperationManager
from dataloader.processes.manager import ProcessManager
from dataloader.processes.registry import processors
from dataloader.processes.waiter import TaskWaiter
from dataloader.retention.archive import Archive, NoArchive, archive_of
from dataloader.schedules.manager import ScheduleManager
from dataloader.storage.database import Database
from dataloader.storage.encryption_repository import EncryptionRepository
from dataloader.storage.flow_repository import FlowRepository
from dataloader.storage.health_repository import HealthRepository
from dataloader.storage.notifier import Notifier
from dataloader.storage.observer_repository import NodeRepository, ObserverRepository
from dataloader.storage.operation_repository import OperationRepository
from dataloader.storage.process_repository import ProcessRepository
from dataloader.storage.repositories import JobRepository
from dataloader.storage.schedule_repository import ScheduleRepository
from dataloader.storage.search_repository import SearchRepository
from dataloader.storage.token_repository import ApiTokenRepository
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.tokens.manager import TokenManager
from dataloader.users.manager import UserManager
from dataloader.users.passwords import Passwords
from dataloader.workers.manager import WorkerManager
from dataloader.workers.pipelines.registry import PipelineRegistry, load_pipeline_modules
from dataloader.workflows.manager import WorkflowManager
from dataloader.workflows.registry import workflows as workflow_definitions


class Managers:
    """The managers over one database. `engine`: set on the HTTP API's (`App.api_app`), the engine's
    beside it — its workers are the queues served here and its listening session the one heard.
    `expensive`: how many searches and counts may run at once (the HTTP API's), None: no bound."""

    def __init__(self, db: Database, registry: PipelineRegistry, *, engine: Managers | None = None,
                 expensive: ExpensiveQueries | None = None) -> None:
        self.db = db
        self.registry = registry
        self.engine = engine
        self.expensive = expensive
        self.nodes: list[WorkerManager] = []  # the nodes working this database's queues now
        self.shards: dict[str, Managers] = {}  # every other shard's (the default shard's only)
        self._schedules: ScheduleManager | None = None
        self._observers: ObserverManager | None = None
        self._processes: ProcessManager | None = None
        self._workflows: WorkflowManager | None = None
        self._waiter: TaskWaiter | None = None
        self._health: HealthReader | None = None
        self._archive: Archive | NoArchive | None = None
        self._passwords: Passwords | None = None
        self._tokens: TokenManager | None = None
        self.repo: JobRepository
        self.jobs: JobManager

    @classmethod
    def of(cls, settings: Settings, registry: PipelineRegistry, *, embedded: bool) -> Managers:
        """The managers over a new database root of `settings` (opened by `open()`), whose default
        shard's pool has a connection for each process task."""
        return cls(Database(settings, embedded=embedded, process_slots=node.process_concurrency), registry)

    def serve_beside(self, engine: Managers) -> None:
        """Make these the HTTP API's beside `engine`'s: a bounded pool (DL_API_POOL_SIZE, statements
        ending after DL_API_STATEMENT_TIMEOUT_SEC), at most DL_API_MAX_EXPENSIVE_QUERIES searches and
        counts at once, and the engine's workers as the queues served here. Before `open()`."""
        self.db.api, self.engine = True, engine
        self.expensive = ExpensiveQueries(self.settings.api_max_expensive_queries)

    @property
    def settings(self) -> Settings:
        return self.db.settings

    @property
    def shard_of(self) -> Callable[[str], str]:
        return self.db.shard_of

    async def open(self, *, migrate_schema: bool = False) -> None:
        """Load the pipeline modules (DL_PIPELINE_MODULES) and the node's own, open the database root
        (Database.open), and build the job manager of it and of every other shard's: with shards,
        `jobs` sends each job to the shard of its queue."""
        settings = self.settings
        load_pipeline_modules(settings.pipeline_module_names)
        node.register_node_pipelines(self.registry)
        await self.db.open(migrate_schema=migrate_schema)
        self._build()

    def _build(self) -> None:
        settings = self.settings
        self.repo = JobRepository(self.db.enqueue_on)  # single enqueues on the database's group commit
        self.jobs = JobManager(self.repo, self.registry, default_lease_ttl_sec=settings.default_lease_ttl_sec,
                               max_args_bytes=settings.max_args_bytes, served_queues=self.served_queues,
                               audit_enqueue=settings.audit_enqueue)
        for name, shard_db in self.db.shards.items():
            engine = self.engine.shards[name] if self.engine is not None else None
            shard = self.shards[name] = Managers(shard_db, self.registry, engine=engine)
            shard._build()
        if self.shards:
            self.jobs = ShardedJobManager(  # type: ignore[assignment]
                {DEFAULT_SHARD: self.jobs, **{name: shard.jobs for name, shard in self.shards.items()}},
                self.shard_of)

    async def stop(self, *, locks_held: bool = False) -> bool:
        """Stop every shard's nodes and close its database, then this one's nodes, and drop the
        built managers. Returns whether connections of this database still hold a lock_key (a sync
        pipeline that could not be interrupted): its pools are then closed without waiting."""
        shards, self.shards = self.shards, {}
        for shard in reversed(shards.values()):
            await shard.db.close(locks_held=await shard.stop(locks_held=locks_held))
        for manager in list(self.nodes):
            await manager.stop()
            locks_held = locks_held or manager.holds_stray_locks
        waiter, self._waiter = self._waiter, None
        self._processes = self._schedules = self._observers = self._health = None
        if waiter is not None:
            await waiter.close()
        return locks_held

    def everywhere(self) -> list[Managers]:
        """This database's and every other shard's, in DL_SHARDS_JSON's order."""
        return [self, *self.shards.values()]

    def of_queue(self, queue: str) -> Managers:
        return self.shards.get(self.shard_of(queue), self)

    def pools(self, queue: str | None = None) -> list[asyncpg.Pool]:
        """The pool of `queue`'s shard; without a queue, every shard's."""
        return [self.of_queue(queue).db.pool] if queue is not None else [m.db.pool for m in self.everywhere()]

    @property
    def notifier(self) -> Notifier:
        """The node's one listening session (the engine's, beside an HTTP API's)."""
        return self.engine.notifier if self.engine is not None else self.db.notifier

    def served_queues(self) -> frozenset[str]:
        """Queues whose workers run in this process right now."""
        if self.engine is not None:
            return self.engine.served_queues()
        own = frozenset(queue for manager in self.nodes for queue in manager.queues)
        return own.union(*(shard.served_queues() for shard in self.shards.values()))

    def connections_budget(self) -> int:
        """Connections this node may open: its pools' maximum sizes (and the engine's beside)."""
        engine = self.engine.db.max_connections() if self.engine is not None else 0
        return self.db.max_connections() + engine

    # -- the node working `queues` ------------------------------------------------------------------

    @asynccontextmanager
    async def running(self, queues: Sequence[Queue | str] | None, *, reaper: bool) -> AsyncIterator[WorkerManager]:
        """The node working `queues` (default: the settings' workers), its duties' settings checked
        first (a ConfigError naming the variable, as the CLI reports it)."""
        settings = self.settings
        node.check_duty_settings(settings)
        ensure_visible(settings.log_level, settings.log_format)
        wanted = settings.workers if queues is None else [q if isinstance(q, Queue) else Queue(q) for q in queues]
        async with self._running(wanted, reaper) as manager:
            yield manager

    @asynccontextmanager
    async def _running(self, queues: list[Queue], reaper: bool) -> AsyncIterator[WorkerManager]:
        """Each shard's queues are worked by a node of that shard's (its own control connections,
        LISTEN, reaper and duties on its database); the default shard always runs its node:
        schedules, processes and observers live there."""
        if not self.shards:
            async with self._running_here(queues, reaper) as manager:
                yield manager
            return
        async with contextlib.AsyncExitStack() as stack:
            for name, shard in self.shards.items():
                theirs = [q for q in queues if self.shard_of(q.queue) == name]
                if theirs:
                    await stack.enter_async_context(shard._running(theirs, reaper))
            mine = [q for q in queues if self.shard_of(q.queue) == DEFAULT_SHARD]
            async with self._running_here(mine, reaper) as manager:
                yield manager

    def _running_here(self, queues: list[Queue], reaper: bool) -> contextlib.AbstractAsyncContextManager[WorkerManager]:
        return node.running(self.db, self.settings.model_copy(update={"workers": queues}), self.registry,
                            self.own_flow(), self.nodes, reaper=reaper, shard_of=self.shard_of,
                            notifier=self.notifier)

    # -- the capabilities ---------------------------------------------------------------------------

    @property
    def schedules(self) -> ScheduleManager:
        if self._schedules is None:
            self._schedules = ScheduleManager(ScheduleRepository(self.db.pool), check_task=self._check_schedule_task)
        return self._schedules

    def _check_schedule_task(self, task: str, queue: str, served: frozenset[str] | None = None) -> None:
        """A schedule's task as an enqueue's; and its queue on the default shard, whose scheduler
        enqueues its ticks into its own database (docs/scaling.md "Past one primary")."""
        check_schedule_shard(queue, self.shard_of, DEFAULT_SHARD)
        self.jobs.check_task(task, queue, served)

    @property
    def count_timeout_sec(self) -> float | None:
        """Counts of an HTTP request are bounded (DL_API_COUNT_TIMEOUT_SEC); a library caller's are not."""
        return self.settings.api_count_timeout_sec if self.engine is not None else None

    def search(self) -> JobSearch | ShardedSearch:
        """Search and counts: on this database, or on every shard's within one expensive slot."""
        if not self.shards:
            return self.job_search()
        return ShardedSearch(self.job_search(), [m.job_search(limited=False) for m in self.everywhere()])

    def job_search(self, *, limited: bool = True) -> JobSearch:
        return JobSearch(SearchRepository(self.db.pool, count_timeout_sec=self.count_timeout_sec),
                         self.expensive if limited else None)

    def keys(self) -> KeyManager:
        """Key status and rotation over every shard's payloads."""
        return KeyManager([EncryptionRepository(m.db.pool, count_timeout_sec=self.count_timeout_sec)
                           for m in self.everywhere()])

    def operations(self) -> OperationManager:
        if not self.shards:
            return self.own_operations()
        return ShardedOperationManager(  # type: ignore[return-value]
            {m.db.shard: m.own_operations() for m in self.everywhere()}, self.shard_of)

    def own_operations(self) -> OperationManager:
        return OperationManager(OperationRepository(self.db.pool, count_timeout_sec=self.count_timeout_sec),
                                self.job_search(), default_batch_size=self.settings.operations_batch_size)

    @property
    def observers(self) -> ObserverManager:
        if self._observers is None:
            self._observers = ObserverManager(ObserverRepository(self.db.pool), NodeRepository(self.db.pool),
                                              observer_kinds)
        return self._observers

    @property
    def waiter(self) -> TaskWaiter:
        """Where callers wait for a process task or a workflow run to end: subscriptions on the
        node's one listening session (an App without workers has that session too: it starts on
        the first wait), with the fallback poll of DL_POLL_FALLBACK_SEC."""
        if self._waiter is None:
            self._waiter = TaskWaiter(poll_sec=self.settings.poll_fallback_sec, notifier=self.notifier)
        return self._waiter

    @property
    def processes(self) -> ProcessManager:
        if self._processes is None:
            settings = self.settings
            self._processes = ProcessManager(
                ProcessRepository(self.db.pool), processors, self.waiter, max_args_bytes=settings.max_args_bytes,
                default_lease_ttl_sec=settings.default_lease_ttl_sec, operations=self.operations,
                idle_sec=settings.process_idle_sec)
        return self._processes

    @property
    def workflows(self) -> WorkflowManager:
        if self._workflows is None:
            self._workflows = WorkflowManager(
                WorkflowRepository(self.db.pool), self.jobs, workflow_definitions,
                max_args_bytes=self.settings.max_args_bytes, default_lease_ttl_sec=self.settings.default_lease_ttl_sec,
                waiter=lambda: self.waiter,
                operations=self.own_operations)  # runs live on the default shard
        return self._workflows

    @property
    def health(self) -> HealthReader:
        if self._health is None:
            self._health = HealthReader(HealthRepository(self.db.pool), connections_budget=self.connections_budget,
                                        xmin_warn_sec=self.settings.db_xmin_warn_sec)
        return self._health

    @property
    def archive(self) -> Archive | NoArchive:
        """DL_ARCHIVE_URL's archive (its manifest read once and kept), or the one that says it is unset."""
        if self._archive is None:
            self._archive = archive_of(self.settings) or NoArchive()
        return self._archive

    @property
    def users(self) -> UserManager:
        """Console users live on the default shard (as the sessions do). The hasher is kept: its
        dummy hash (an unknown name's sign-in) is made once."""
        if self._passwords is None:
            self._passwords = Passwords(time_cost=self.settings.password_hash_time_cost,
                                        memory_kib=self.settings.password_hash_memory_kib)
        return UserManager(self.db.users(), self._passwords, self.db.console_sessions())

    @property
    def tokens(self) -> TokenManager:
        """API tokens live on the default shard. Built once per App (its cache of looked-up tokens is
        what keeps the guard off the database), on the pool of the moment."""
        if self._tokens is None or self._tokens.repo.pool is not self.db.pool:
            self._tokens = TokenManager(ApiTokenRepository(self.db.pool))
        return self._tokens

    def audit(self) -> AuditTrail:
        """The audit trail of every shard: each holds the rows of the changes made in it."""
        return AuditTrail([m.db.pool for m in self.everywhere()])

    def flow(self) -> FlowManager:
        if not self.shards:
            return self.own_flow()
        return ShardedFlowManager(  # type: ignore[return-value]
            {m.db.shard: m.own_flow() for m in self.everywhere()}, self.shard_of)

    def own_flow(self) -> FlowManager:
        return FlowManager(FlowRepository(self.db.pool))

    async def queue_stats(self) -> list[asyncpg.Record]:
        """Jobs by queue and status on every shard (dl_queue_jobs of /metrics)."""
        rows = [await m.repo.queue_stats() for m in self.everywhere()]
        return [row for shard_rows in rows for row in shard_rows]
