"""`App`: the facade of dataloader — the one object user code, the CLI, the HTTP service, the tests
and `bench/` start from:

    app = App(Settings(db_dsn="postgresql://…"))
    async with app:
        job = await app.enqueue("load.cbr", {"rows": 10}, queue="load", lock_key="cbr")
        async with app.running(queues=[Queue("load", concurrency=4)]):
            ...

It holds no wiring of its own: the database root (storage/database.py `Database`) opens the
connections, the capabilities' managers over it are built in managers.py and the workers and duties
in node.py (the node root). Each method here checks a caller's input once and hands it on.

A library App without a DSN is an error, never a private database (a producer would enqueue into a
database no worker reads): `App.embedded()` (and `serve`, `worker`) start the embedded PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from dataloader.config import Queue, Settings, load_settings, validated_shards
from dataloader.jobs.enqueue import EnqueueOptions, batch_items, enqueue_request
from dataloader.jobs.manager import JobManager, JobRequest
from dataloader.jobs.search import SearchPage
from dataloader.managers import Managers
from dataloader.model.flow import QueueFlow, QueueScaling, QueueSettingsChanges, TaskSettingsChanges
from dataloader.model.ids import job_id_of, new_id
from dataloader.model.job import Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.model.job_filter import JobFilter
from dataloader.model.queue_depth import QueueDepth
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import PruneReport
from dataloader.retention.shards import errors_shards, partitions_shards, prune_shards, rollup_shards, stats_shards
from dataloader.storage.database import Database
from dataloader.workers.pipelines.registry import PipelineRegistry, registry

if TYPE_CHECKING:
    import asyncpg
    from sqlalchemy.ext.asyncio import async_sessionmaker

    from dataloader.audit.trail import AuditTrail
    from dataloader.encryption.keys import KeyManager
    from dataloader.flow.manager import FlowManager
    from dataloader.health.reader import HealthReader
    from dataloader.observers.manager import ObserverManager
    from dataloader.operations.manager import OperationManager
    from dataloader.processes.manager import ProcessManager
    from dataloader.retention.archive import Archive, NoArchive
    from dataloader.schedules.manager import ScheduleManager
    from dataloader.storage.database import JobRepository, Notifier
    from dataloader.tokens.manager import TokenManager
    from dataloader.users.manager import UserManager
    from dataloader.workers.manager import WorkerManager
    from dataloader.workflows.manager import WorkflowManager


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
        self.registry = pipelines if pipelines is not None else registry
        # The database root, and the capabilities' managers over it and every shard's (managers.py).
        self._managers = Managers.of(self.settings, self.registry, embedded=embedded)
        self.db: Database = self._managers.db
        self.repo: JobRepository
        self.jobs: JobManager
        self.audit: AuditTrail  # on open (docs/security.md): `await app.audit.search(actor=, action=, since=)`

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
        await self._managers.open(migrate_schema=migrate_schema)
        self.repo, self.jobs, self.audit = self._managers.repo, self._managers.jobs, self._managers.audit()
        return self

    def shard_of(self, queue: str) -> str:
        """The name of the shard that holds `queue` (`default` unless DL_SHARDS_JSON names it)."""
        return self._managers.shard_of(queue)

    async def api_app(self) -> App:
        """An open App serving HTTP requests next to this one (`dataloader serve`): the same database, settings and
        pipelines, but its own bounded pool and searches (managers.py `serve_beside`), so no request, however slow,
        makes the engine's claims, heartbeats or duties wait for a connection. Close it before this App."""
        api = App(self.settings.model_copy(update={"db_dsn": self.dsn}), pipelines=self.registry)
        api._managers.serve_beside(self._managers)
        return await api.open()

    async def close(self, *, locks_held: bool = False) -> None:
        """Stop in-process workers, close the pool, stop the embedded server. `locks_held`: some connections still hold
        the lock_key of a sync pipeline that could not be interrupted; do not wait for them."""
        await self.db.close(locks_held=await self._managers.stop(locks_held=locks_held))

    async def __aenter__(self) -> App:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def dsn(self) -> str:
        return self.db.dsn

    @property
    def session_dsn(self) -> str:
        """Where sessions go (locks, LISTEN, migrations): DL_DB_DIRECT_DSN beside a pooled DL_DB_DSN, else `dsn`."""
        return self.db.session_dsn

    @property
    def pool(self) -> asyncpg.Pool:
        return self.db.pool

    @property
    def notifier(self) -> Notifier:
        """The node's one listening session, for every NOTIFY this process hears. Started by its first user."""
        return self._managers.notifier

    @property
    def sessionmaker(self) -> async_sessionmaker:
        """SQLAlchemy async sessions on the same database (made on first use)."""
        return self.db.sessionmaker

    async def migrate(self) -> tuple[str | None, str]:
        """Bring the schema to head (on every shard); returns the default shard's (before, after) revisions."""
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
        delete does (its `job.delete` audit row stays). JobNotFinished for a queued or running job."""
        await self.jobs.delete(job_id_of(job_id))

    async def events(self, job_id: uuid.UUID | str, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        """The job's journal, oldest first."""
        return await self.jobs.events(job_id_of(job_id), after_event_id=after, limit=limit)

    def served_queues(self) -> frozenset[str]:
        """Queues whose workers run in this process right now."""
        return self._managers.served_queues()

    @asynccontextmanager
    async def running(self, queues: Sequence[Queue | str] | None = None, *, reaper: bool = True
                      ) -> AsyncIterator[WorkerManager]:
        """Run workers in this process for the block: the same engine as `dataloader worker`, with no signal
        handlers of its own. `queues` default to the settings' workers. Leaving the block stops them
        gracefully (running jobs stop at their next chunk; unfinished ones go back to the queue)."""
        async with self._managers.running(queues, reaper=reaper) as manager:
            yield manager

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
        """Delete finished jobs (with their journal rows) now, as the pruner does: by the configured policy, or with
        `older_than` (seconds, a timedelta or "7d") that age for `statuses` (default: all finished). dry_run counts."""
        return await prune_shards(self._managers.pools(), self.settings, older_than=older_than, statuses=statuses,
                                  batch_size=batch_size, dry_run=dry_run, queues=queues)

    async def retention_partitions(self) -> dict[str, Any]:
        """The journal's partitions, their ranges, row estimates and the next drop (docs/patterns.md)."""
        return await partitions_shards(self._managers.pools(), self.settings)

    async def rollup_stats(self) -> int:
        """Roll up the jobs finished up to now - DL_STATS_LAG_SEC (what the leader does every
        DL_STATS_PERIOD_SEC); returns how many jobs were counted."""
        return await rollup_shards(self._managers.pools(), self.settings)

    async def stats(self, *, queue: str | None = None, start: datetime | None = None,
                    end: datetime | None = None, hours: float = 24, unrolled: bool = False) -> dict[str, Any]:
        """Per queue and hour, from the rollup: finished counts by status, run and wait time (count,
        mean, p95, max), the oldest waiting job. From `start` (default: `end - hours`) to `end` (default:
        now). `unrolled`: the counts also hold the jobs finished since the rollup's watermark (read
        from dl_jobs, so a job counts the moment it finished; not in the timings): the console's."""
        return await stats_shards(self._managers.pools(queue), queue=queue, start=start, end=end, hours=hours,
                                  unrolled=unrolled)

    async def stats_errors(self, *, queue: str | None = None, since: datetime | None = None,
                           limit: int = 20) -> dict[str, Any]:
        """Failed and lost jobs grouped by their error's first line, most frequent first, since `since` (1 h ago)."""
        return await errors_shards(self._managers.pools(queue), queue=queue, since=since, limit=limit)

    # -- capabilities: one manager each, over this App's database root (managers.py) -------------

    @property
    def schedules(self) -> ScheduleManager:
        """Schedules: create, get, list, pause, resume, delete, history (`app.schedules.spec(...)`)."""
        return self._managers.schedules

    async def search(self, filter: JobFilter | Mapping[str, Any] | None = None, *, cursor: str | None = None,
                     limit: int = 100, count: bool = False) -> SearchPage:
        """Jobs matching `filter` (a JobFilter or a mapping of its fields: queues, tasks, statuses, error pattern,
        created/finished ranges, args_contains, args_path, lock_key_prefix, held), newest first; `page.next_cursor`
        gets the next page, `count=True` also counts them all."""
        return await self._managers.search().search(filter, cursor=cursor, limit=limit, count=count)

    async def count_jobs(self, filter: JobFilter | Mapping[str, Any] | None = None, *,
                         at_most: int | None = None) -> int:
        """How many jobs match `filter` (what a bulk operation's dry run reports); with `at_most`,
        counting stops there (a capped count that stays cheap on a big table)."""
        return await self._managers.search().count(filter, at_most=at_most)

    @property
    def keys(self) -> KeyManager:
        """Encryption at rest (docs/security.md): `await app.keys.status()`, `await app.keys.rotate()`."""
        return self._managers.keys()

    @property
    def operations(self) -> OperationManager:
        """Tracked bulk operations (docs/operations.md): start, get, list, pause, resume, cancel, events, wait."""
        return self._managers.operations()

    @property
    def observers(self) -> ObserverManager:
        """Observers and the node registry (docs/observers.md): create, get, list, stop, nodes."""
        return self._managers.observers

    @property
    def processes(self) -> ProcessManager:
        """Event-sourced processes of `@processor(ns)`s: init, call, repair, simple_repair, get, list, remove."""
        return self._managers.processes

    @property
    def workflows(self) -> WorkflowManager:
        """Durable workflows of `@workflow(name)`s (docs/workflows.md): start, get, result, signal, cancel…"""
        return self._managers.workflows

    async def signal_workflow(self, run_id: uuid.UUID | str, name: str, payload: Any = None) -> None:
        """Send signal `name` to a workflow run (`app.workflows.signal`)."""
        await self.workflows.signal(run_id, name, payload)

    @property
    def health(self) -> HealthReader:
        """The database's health as it affects the queue, for /metrics (docs/observability.md): `read()`."""
        return self._managers.health

    @property
    def archive(self) -> Archive | NoArchive:
        """DL_ARCHIVE_URL's archive (docs/patterns.md "Archival"): `await app.archive.history(job_id)`."""
        return self._managers.archive

    @property
    def users(self) -> UserManager:
        """Console users and their sign-in `.sessions` (docs/security.md): create, list, set_role, delete…"""
        return self._managers.users

    @property
    def tokens(self) -> TokenManager:
        """API tokens for machines (docs/security.md): `create` (the secret shown once), `list`, `revoke`."""
        return self._managers.tokens

    def connections_budget(self) -> int:
        """Connections this node may open: its pools' maximum sizes (the engine's, and the API's beside)."""
        return self._managers.connections_budget()

    @property
    def flow(self) -> FlowManager:
        """Flow control's rules (docs/flow-control.md); `pause_queue`, `resume_queue`, `queues` are short forms."""
        return self._managers.flow()

    async def queue_stats(self) -> list[asyncpg.Record]:
        """Jobs by queue and status on every shard (dl_queue_jobs of /metrics)."""
        return await self._managers.queue_stats()

    async def pause_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """Pause `queue` on every node, durably: running jobs finish, nothing new starts, enqueue still works. When it
        returns, nothing of the queue starts any more: it waits for the claims in flight, and every later claim sees it
        (docs/flow-control.md). Idempotent. With `task`, only that task of the queue pauses; its other tasks run on."""
        return await self.flow.pause(queue, task)

    async def resume_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """Resume `queue` (or one `task` of it) and wake its workers on every node. Idempotent."""
        return await self.flow.resume(queue, task)

    async def configure_queue(self, queue: str, **changes: Unpack[QueueSettingsChanges]) -> QueueFlow:
        """Change `queue`'s limits across every node: `concurrency`, `partition_concurrency`, `rate_limit` with
        `rate_period_sec`, `partition_rate_limit` with `partition_rate_period_sec` (docs/flow-control.md). A partial
        update: a setting not named is kept, an explicit None clears it. Runtime settings win over declared ones
        (`Queue(limits=...)`, DL_QUEUES_JSON) and persist. Holds for every claim that starts after this call returns."""
        return await self.flow.configure(queue, changes)

    async def configure_task(self, queue: str, task: str, **changes: Unpack[TaskSettingsChanges]) -> QueueFlow:
        """Change the limits of `task` in `queue` (docs/flow-control.md "Limits per task"): `concurrency`,
        `rate_limit` with `rate_period_sec`; a partial update, as `configure_queue`. Returns the queue's state."""
        return await self.flow.configure_task(queue, task, changes)

    async def queue_scaling(self, queue: str, *, target_sec: float = 60.0) -> QueueScaling:
        """The autoscaling signal of `queue` (docs/flow-control.md "Autoscaling"): the job slots it
        wants on all nodes now, from its backlog, its oldest job's age, its recent throughput, its
        pause and its concurrency limit, to drain the backlog within `target_sec`; with the inputs."""
        return (await self.flow.scaling(queue, target_sec))[0]

    async def queues(self) -> list[QueueFlow]:
        """Every queue that is paused, has limits, or has queued or running jobs: its flow state, limits and use."""
        return await self.flow.list()

    async def queue_depths(self) -> list[QueueDepth]:
        """Every queue with live or held jobs: due, delayed, running and held counts, the oldest due job's age."""
        return await self.jobs.queue_depths()
