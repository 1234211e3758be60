"""`SyncApp`: dataloader for synchronous programs (Django, Flask, scripts, a sync test suite).

The engine is asyncio (asyncpg pool, LISTEN, workers). A sync program cannot `await`, and running
`asyncio.run(app.enqueue(...))` per call would be wrong three ways: every call would build a new
event loop and, since an asyncpg pool belongs to the loop that made it, a new pool too (a
connection handshake per call instead of a pooled connection); calls from several threads could
not share anything; and it fails outright in a thread that already runs a loop. So a `SyncApp`
starts ONE private event loop in a daemon thread, opens ONE `App` (one pool) on it, and every
method hands its coroutine to that loop with `asyncio.run_coroutine_threadsafe` and waits for the
result. That is thread-safe: a web server's worker threads may all share one `SyncApp`.

    from dataloader import Settings, SyncApp

    with SyncApp(Settings(db_dsn="postgresql://…")) as app:
        job = app.enqueue("load.cbr", {"rows": 10}, queue="load", lock_key="cbr")
        print(app.get(job.id).status)

The methods have `App`'s names and arguments and return the same values (`Job`, `JobPage`,
`JobEvent`) and raise the same exceptions.

`enqueue(..., conn=...)` and `enqueue_many(..., conn=...)` take the caller's SYNC connection — a
psycopg 3 `Connection`, or a SQLAlchemy `Connection` / `Session` (over psycopg, psycopg2 or any
driver with a `pyformat`, `format` or `named` paramstyle) — and insert the job in the caller's
transaction, so it exists if and only if that transaction commits. That path runs on the caller's
thread and connection, not on the private loop, and it is App's own path: `App.enqueue` /
`App.enqueue_many` (the same request builder, JobManager and JobRepository code) with the
connection wrapped in a `storage.caller_connection.SyncConnection`, whose statements run at once,
so the coroutine completes on this thread without an event loop (`run_at_once`).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import Unpack

from dataloader.app import App
from dataloader.config import Queue, Settings, load_settings
from dataloader.encryption.keys import DEFAULT_BATCH_SIZE, KeyStatus, RotationReport
from dataloader.jobs.enqueue import EnqueueOptions
from dataloader.jobs.manager import JobRequest
from dataloader.model.api_token import ApiToken, CreatedToken, TokenSpec
from dataloader.model.audit import AuditFilter, AuditPage
from dataloader.model.flow import QueueFlow, QueueScaling, QueueSettingsChanges, TaskSettingsChanges
from dataloader.model.job import Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.model.operation import DryRun, Operation
from dataloader.model.principal import Role
from dataloader.model.queue_depth import QueueDepth
from dataloader.model.user import User
from dataloader.model.workflow import WorkflowRun, WorkflowRunPage
from dataloader.retention.archive import ArchivedJob, ManifestEntry
from dataloader.storage.caller_connection import SyncConnection, run_at_once
from dataloader.workers.pipelines.registry import PipelineRegistry

if TYPE_CHECKING:
    from dataloader.workers.manager import WorkerManager

T = TypeVar("T")


class SyncApp:
    """A blocking `App`. `SyncApp(settings)` does no I/O; `open()` (or `with SyncApp(...) as app`)
    starts the private loop thread and connects; `close()` stops both."""

    def __init__(self, settings: Settings | None = None, *, pipelines: PipelineRegistry | None = None,
                 embedded: bool = False, shards: Mapping[str, Any] | None = None) -> None:
        self.app = App(settings, pipelines=pipelines, embedded=embedded, shards=shards)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()

    @classmethod
    def embedded(cls, settings: Settings | None = None, *, data_dir: str | Path | None = None,
                 pipelines: PipelineRegistry | None = None) -> SyncApp:
        """`App.embedded`, blocking."""
        settings = settings if settings is not None else load_settings()
        if data_dir is not None:
            settings = settings.model_copy(update={"data_dir": Path(data_dir)})
        return cls(settings, pipelines=pipelines, embedded=True)

    @property
    def settings(self) -> Settings:
        return self.app.settings

    @property
    def registry(self) -> PipelineRegistry:
        return self.app.registry

    @property
    def dsn(self) -> str:
        return self.app.dsn

    # -- life cycle ------------------------------------------------------------------------------

    def open(self, *, migrate_schema: bool = False) -> SyncApp:
        """Start the loop thread and open the App on it (see `App.open`)."""
        with self._lifecycle:
            if self._loop is not None:
                raise RuntimeError("this SyncApp is already open")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_run_loop, args=(loop,), name="dataloader-sync", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            try:
                self._call(self.app.open(migrate_schema=migrate_schema))
            except BaseException:
                self._stop_loop()
                raise
        return self

    def close(self, *, locks_held: bool = False) -> None:
        """Stop in-process workers, close the pool, stop the loop thread. Closing a closed
        SyncApp does nothing."""
        with self._lifecycle:
            if self._loop is None:
                return
            try:
                self._call(self.app.close(locks_held=locks_held))
            finally:
                self._stop_loop()

    def __enter__(self) -> SyncApp:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the private loop and wait for its result (or its exception, as is)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            coro.close()
            raise RuntimeError("the SyncApp is not open: call app.open() or use `with SyncApp(...)`")
        if threading.current_thread() is thread:
            coro.close()
            raise RuntimeError("a SyncApp method was called on its own event loop thread (it would wait "
                               "for itself); use the async App (sync_app.app) there")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting: do not leave the call running
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run any coroutine that uses `self.app` on the App's loop and wait for it (what
        `dataloader.testing.drain_sync` does)."""
        return self._call(coro)

    def migrate(self) -> tuple[str | None, str]:
        """Bring the schema to head; returns (revision before, revision after)."""
        return self._call(self.app.migrate())

    # -- producing -------------------------------------------------------------------------------

    def enqueue(self, task: str, args: Mapping[str, Any] | None = None, *, conn: Any = None,
                **options: Unpack[EnqueueOptions]) -> Job:
        """`App.enqueue`. With `conn` (a psycopg 3 `Connection`, or a SQLAlchemy sync `Connection`
        or `Session`), the job is inserted in that connection's transaction, on the calling
        thread: it exists if and only if your transaction commits.

            with psycopg.connect(dsn) as conn:           # commits at the end of the block
                conn.execute("INSERT INTO orders ...")
                app.enqueue("orders.confirm", {"id": 7}, conn=conn)
        """
        if conn is None:
            return self._call(self.app.enqueue(task, args, **options))
        runner = SyncConnection(conn)  # refuse a foreign connection before anything else
        self._check_open()
        return run_at_once(self.app.enqueue(task, args, conn=runner, **options))

    def enqueue_many(self, jobs: Iterable[JobRequest | Mapping[str, Any]], *, conn: Any = None
                     ) -> list[uuid.UUID]:
        """`App.enqueue_many`; `conn` as for `enqueue`."""
        if conn is None:
            items = list(jobs)  # consume the iterable on this thread, not on the loop
            return self._call(self.app.enqueue_many(items))
        runner = SyncConnection(conn)
        self._check_open()
        return run_at_once(self.app.enqueue_many(jobs, conn=runner))

    def _check_open(self) -> None:
        if self._loop is None:
            raise RuntimeError("the SyncApp is not open: call app.open() or use `with SyncApp(...)`")

    # -- reading and steering --------------------------------------------------------------------

    def chain(self, chain_or_job_id: uuid.UUID | str) -> Chain:
        """`App.chain`."""
        return self._call(self.app.chain(chain_or_job_id))

    def get(self, job_id: uuid.UUID | str) -> Job:
        return self._call(self.app.get(job_id))

    def list(self, *, queue: str | None = None, task: str | None = None,
             status: JobStatus | str | Sequence[JobStatus | str] | None = None,
             created_from: datetime | None = None, created_to: datetime | None = None,
             cursor: str | None = None, limit: int = 100) -> JobPage:
        """Jobs newest first (without args); `page.next_cursor` gets the next page."""
        return self._call(self.app.list(queue=queue, task=task, status=status, created_from=created_from,
                                        created_to=created_to, cursor=cursor, limit=limit))

    def cancel(self, job_id: uuid.UUID | str) -> Job:
        """A queued job is canceled at once; a running one stops at its next chunk."""
        return self._call(self.app.cancel(job_id))

    def retry(self, job_id: uuid.UUID | str) -> Job:
        """A failed, canceled or lost job back to the queue with a fresh attempt budget."""
        return self._call(self.app.retry(job_id))

    def set_job_priority(self, job_id: uuid.UUID | str, priority: int) -> Job:
        """A queued job's new priority (lower runs first), journaled as `priority_changed`."""
        return self._call(self.app.set_job_priority(job_id, priority))

    def delete_job(self, job_id: uuid.UUID | str) -> None:
        """Delete a finished job with its journal; a queued or running one is canceled first."""
        return self._call(self.app.delete_job(job_id))

    def events(self, job_id: uuid.UUID | str, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        """The job's journal, oldest first."""
        return self._call(self.app.events(job_id, after=after, limit=limit))

    # -- flow control (docs/flow-control.md) -----------------------------------------------------

    def pause_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """`App.pause_queue`: nothing new of `queue` (or of its `task`) starts on any node; running
        jobs finish."""
        return self._call(self.app.pause_queue(queue, task=task))

    def resume_queue(self, queue: str, *, task: str | None = None) -> QueueFlow:
        """`App.resume_queue`."""
        return self._call(self.app.resume_queue(queue, task=task))

    def configure_queue(self, queue: str, **changes: Unpack[QueueSettingsChanges]) -> QueueFlow:
        """`App.configure_queue`: change a queue's limits across every node (partial; None clears)."""
        return self._call(self.app.configure_queue(queue, **changes))

    def configure_task(self, queue: str, task: str, **changes: Unpack[TaskSettingsChanges]) -> QueueFlow:
        """`App.configure_task`: change one task's limits in a queue across every node (partial; None clears)."""
        return self._call(self.app.configure_task(queue, task, **changes))

    def queue_scaling(self, queue: str, *, target_sec: float = 60.0) -> QueueScaling:
        """`App.queue_scaling`."""
        return self._call(self.app.queue_scaling(queue, target_sec=target_sec))

    def queues(self) -> list[QueueFlow]:
        """`App.queues`."""
        return self._call(self.app.queues())

    def queue_depths(self) -> list[QueueDepth]:
        """`App.queue_depths`."""
        return self._call(self.app.queue_depths())

    # -- working ---------------------------------------------------------------------------------

    @contextmanager
    def running(self, queues: Sequence[Queue | str] | None = None, *, reaper: bool = True
                ) -> Iterator[WorkerManager]:
        """`App.running`: workers run on the private loop for the duration of the block (sync
        pipelines in its thread pool); leaving it stops them gracefully."""
        context = self.app.running(queues, reaper=reaper)
        manager = self._call(context.__aenter__())
        try:
            yield manager
        finally:
            self._call(context.__aexit__(None, None, None))

    def work(self, stop: threading.Event | None = None, queues: Sequence[Queue | str] | None = None,
             *, reaper: bool = True) -> None:
        """Run workers until `stop` is set (forever without one)."""
        with self.running(queues, reaper=reaper):
            (stop if stop is not None else threading.Event()).wait()


    # -- workflows (docs/workflows.md) -------------------------------------------------------------

    @property
    def workflows(self) -> SyncWorkflows:
        """`app.workflows` of the async App, blocking: start, get, list, result, signal, cancel, restart,
        and the bulk cancel_many, restart_many, retry_many."""
        return SyncWorkflows(self)

    def signal_workflow(self, run_id: uuid.UUID | str, name: str, payload: Any = None) -> None:
        self._call(self.app.signal_workflow(run_id, name, payload))

    # -- the archive (docs/patterns.md "Archival") -------------------------------------------------

    @property
    def archive(self) -> SyncArchive:
        """`app.archive` of the async App, blocking: `history(job_id)`, `entries()`."""
        return SyncArchive(self)

    # -- users (docs/security.md) ------------------------------------------------------------------

    @property
    def users(self) -> SyncUsers:
        """`app.users` of the async App, blocking: create, get, list, set_role, set_password,
        disable, enable, delete."""
        return SyncUsers(self)

    @property
    def tokens(self) -> SyncTokens:
        """`App.tokens`, blocking: `create`, `get`, `list`, `revoke`."""
        return SyncTokens(self)

    # -- the audit trail (docs/security.md "Audit trail") --------------------------------------------

    @property
    def audit(self) -> SyncAudit:
        """`app.audit` of the async App, blocking: `search(actor=, action=, target=, since=, ...)`."""
        return SyncAudit(self)

    @property
    def keys(self) -> SyncKeys:
        """`app.keys` of the async App, blocking: status and rotate."""
        return SyncKeys(self)


class SyncUsers:
    """The blocking twin of `App.users` (each call runs the async one on the SyncApp's loop)."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def create(self, name: str, password: str, role: Role | str = Role.VIEWER) -> User:
        return self._owner._call(self._owner.app.users.create(name, password, role))

    def get(self, name: str) -> User:
        return self._owner._call(self._owner.app.users.get(name))

    def list(self) -> list[User]:
        return self._owner._call(self._owner.app.users.list())

    def set_role(self, name: str, role: Role | str) -> User:
        return self._owner._call(self._owner.app.users.set_role(name, role))

    def set_password(self, name: str, password: str) -> User:
        return self._owner._call(self._owner.app.users.set_password(name, password))

    def disable(self, name: str) -> User:
        return self._owner._call(self._owner.app.users.disable(name))

    def enable(self, name: str) -> User:
        return self._owner._call(self._owner.app.users.enable(name))

    def delete(self, name: str) -> None:
        self._owner._call(self._owner.app.users.delete(name))


class SyncTokens:
    """`app.tokens` of a SyncApp: the same methods, blocking."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def create(self, spec: TokenSpec | None = None, *, created_by: str | None = None, **fields: Any) -> CreatedToken:
        return self._owner._call(self._owner.app.tokens.create(spec, created_by=created_by, **fields))

    def get(self, ref: uuid.UUID | str) -> ApiToken:
        return self._owner._call(self._owner.app.tokens.get(ref))

    def list(self, *, include_revoked: bool = True) -> list[ApiToken]:
        return self._owner._call(self._owner.app.tokens.list(include_revoked=include_revoked))

    def revoke(self, ref: uuid.UUID | str) -> ApiToken:
        return self._owner._call(self._owner.app.tokens.revoke(ref))


class SyncAudit:
    """The blocking twin of `App.audit`."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def search(self, filter: AuditFilter | Mapping[str, Any] | None = None, **fields: Any) -> AuditPage:
        return self._owner._call(self._owner.app.audit.search(filter, **fields))


class SyncKeys:
    """The blocking twin of `App.keys`: status and rotate (docs/security.md "Encryption at rest")."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def status(self) -> KeyStatus:
        return self._owner._call(self._owner.app.keys.status())

    def rotate(self, *, batch_size: int = DEFAULT_BATCH_SIZE) -> RotationReport:
        return self._owner._call(self._owner.app.keys.rotate(batch_size=batch_size))


class SyncWorkflows:
    """The blocking twin of `App.workflows` (each call runs the async one on the SyncApp's loop)."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def start(self, workflow: str, input: Any = None, **options: Any) -> uuid.UUID:
        return self._owner._call(self._owner.app.workflows.start(workflow, input, **options))

    def get(self, run_id: uuid.UUID | str) -> WorkflowRun:
        return self._owner._call(self._owner.app.workflows.get(run_id))

    def result(self, run_id: uuid.UUID | str, *, timeout: float | timedelta = 30.0) -> Any:
        return self._owner._call(self._owner.app.workflows.result(run_id, timeout=timeout))

    def signal(self, run_id: uuid.UUID | str, name: str, payload: Any = None) -> None:
        self._owner._call(self._owner.app.workflows.signal(run_id, name, payload))

    def cancel(self, run_id: uuid.UUID | str) -> WorkflowRun:
        return self._owner._call(self._owner.app.workflows.cancel(run_id))

    def restart(self, run_id: uuid.UUID | str, *, from_step: str | None = None) -> WorkflowRun:
        return self._owner._call(self._owner.app.workflows.restart(run_id, from_step=from_step))

    def list(self, **filters: Any) -> WorkflowRunPage:
        """Runs newest first: `workflow`, `status`, `limit`, `cursor` as `App.workflows.list`."""
        return self._owner._call(self._owner.app.workflows.list(**filters))

    def cancel_many(self, filter: Mapping[str, Any] | None = None, **options: Any) -> Operation | DryRun:
        """`App.workflows.cancel_many`: every run the filter matches, as a tracked bulk operation."""
        return self._owner._call(self._owner.app.workflows.cancel_many(filter, **options))

    def restart_many(self, filter: Mapping[str, Any] | None = None, from_step: str | None = None,
                     **options: Any) -> Operation | DryRun:
        return self._owner._call(self._owner.app.workflows.restart_many(filter, from_step, **options))

    def retry_many(self, filter: Mapping[str, Any] | None = None, **options: Any) -> Operation | DryRun:
        return self._owner._call(self._owner.app.workflows.retry_many(filter, **options))


class SyncArchive:
    """The blocking twin of `App.archive`."""

    def __init__(self, owner: SyncApp) -> None:
        self._owner = owner

    def history(self, job_id: uuid.UUID | str) -> ArchivedJob:
        """A pruned job's row and journal from the archive (JobNotFound when it is not there)."""
        return self._owner._call(self._owner.app.archive.history(job_id))

    def entries(self) -> list[ManifestEntry]:
        """Every manifest entry, oldest written first."""
        return self._owner._call(self._owner.app.archive.entries())


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        # Anything still pending (a call abandoned by KeyboardInterrupt) is cancelled, not leaked.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
