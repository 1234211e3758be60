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
thread and connection, not on the private loop: it is the same SQL text as the async path
(`storage/queries/insert_job.sql`, `insert_jobs_batch.sql` / `insert_jobs_batch_unkeyed.sql`,
`get_job_by_idempotency_key.sql`) and the same request validation (`JobManager.to_new_job`,
`JobManager.batch_columns`) and idempotency rule.
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

from dataloader import metrics
from dataloader.app import App
from dataloader.config import Queue, Settings, load_settings
from dataloader.jobs.manager import JobManager, JobRequest
from dataloader.model.chain import Stage
from dataloader.model.ids import new_id
from dataloader.model.job import Chain, Job, JobEvent, JobPage, JobStatus
from dataloader.storage.caller_connection import json_value
from dataloader.storage.queries import sql
from dataloader.storage.repositories import inserted_job
from dataloader.workers.pipelines.registry import PipelineRegistry

if TYPE_CHECKING:
    from dataloader.storage.repositories import NewJob
    from dataloader.workers.manager import WorkerManager

T = TypeVar("T")


class SyncApp:
    """A blocking `App`. `SyncApp(settings)` does no I/O; `open()` (or `with SyncApp(...) as app`)
    starts the private loop thread and connects; `close()` stops both."""

    def __init__(self, settings: Settings | None = None, *, pipelines: PipelineRegistry | None = None,
                 embedded: bool = False) -> None:
        self.app = App(settings, pipelines=pipelines, embedded=embedded)
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

    def enqueue(
        self,
        task: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        lock_key: str | None = None,
        idempotency_key: str | None = None,
        partition_key: str = "",
        priority: int = 100,
        available_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        lease_ttl_sec: int | None = None,
        timeout_sec: int | None = None,
        then: Sequence[Stage] = (),
        restartable: bool = False,
        unique_for: float | timedelta | None = None,
        unique_key: str | None = None,
        conn: Any = None,
    ) -> Job:
        """`App.enqueue`. With `conn` (a psycopg 3 `Connection`, or a SQLAlchemy sync `Connection`
        or `Session`), the job is inserted in that connection's transaction, on the calling
        thread: it exists if and only if your transaction commits.

            with psycopg.connect(dsn) as conn:           # commits at the end of the block
                conn.execute("INSERT INTO orders ...")
                app.enqueue("orders.confirm", {"id": 7}, conn=conn)
        """
        if conn is None:
            return self._call(self.app.enqueue(
                task, args, queue=queue, lock_key=lock_key, idempotency_key=idempotency_key,
                partition_key=partition_key, priority=priority, available_at=available_at, delay=delay,
                max_attempts=max_attempts, lease_ttl_sec=lease_ttl_sec, timeout_sec=timeout_sec, then=then,
                restartable=restartable, unique_for=unique_for, unique_key=unique_key))
        runner = _CallerConnection(conn)  # refuse a foreign connection before anything else
        job_id = new_id()
        request = self.app._request(task, args, queue=queue, lock_key=lock_key,
                                    idempotency_key=idempotency_key, partition_key=partition_key,
                                    priority=priority, available_at=available_at, delay=delay,
                                    max_attempts=max_attempts, lease_ttl_sec=lease_ttl_sec,
                                    timeout_sec=timeout_sec, then=then, restartable=restartable,
                                    unique_for=unique_for, unique_key=unique_key)
        new_job = self._service().to_new_job(request, "python", job_id)
        return _insert_job(runner, request, new_job)

    def enqueue_many(self, jobs: Iterable[JobRequest | Mapping[str, Any]], *, conn: Any = None
                     ) -> list[uuid.UUID]:
        """`App.enqueue_many`; `conn` as for `enqueue`."""
        if conn is None:
            items = list(jobs)  # consume the iterable on this thread, not on the loop
            return self._call(self.app.enqueue_many(items))
        runner = _CallerConnection(conn)
        service = self._service()
        items = self.app._batch_items(jobs)
        if not items:
            return []
        batch = service.batch_columns(items)
        ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases = batch.columns
        if not any(keys):  # repositories.insert_job_columns: nothing can be skipped, the cheaper statement
            rows = runner.fetch(sql("insert_jobs_batch_unkeyed"), [
                ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases,
                "python", batch.timeouts, None])
            if rows[0]["inserted"] != len(ids):
                raise RuntimeError(f"inserted {rows[0]['inserted']} of {len(ids)} jobs")
        else:
            rows = runner.fetch(sql("insert_jobs_batch"), [
                ids, queues, tasks, args, keys, locks, partitions, priorities, available, attempts, leases,
                "python", batch.timeouts, None])
            ids = [_as_uuid(row["job_id"]) for row in rows]
        batch.count_enqueued(ids)
        return ids

    def _service(self) -> JobManager:
        if self._loop is None:
            raise RuntimeError("the SyncApp is not open: call app.open() or use `with SyncApp(...)`")
        return self.app.jobs

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

    def events(self, job_id: uuid.UUID | str, *, after: int = 0, limit: int = 1000) -> list[JobEvent]:
        """The job's journal, oldest first."""
        return self._call(self.app.events(job_id, after=after, limit=limit))

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


# -- enqueue on the caller's sync connection -------------------------------------------------------
# The sync twin of storage/caller_connection.py (which drives asyncpg and SQLAlchemy async
# connections). It only translates placeholders: the statements are the files of storage/queries.


def _insert_job(runner: _CallerConnection, request: JobRequest, new_job: NewJob) -> Job:
    """repositories.insert_job + JobManager.trigger, on the caller's connection."""
    params = [new_job.job_id, new_job.queue, new_job.task, new_job.args_json, new_job.idempotency_key,
              new_job.lock_key, new_job.partition_key, new_job.priority, new_job.available_at,
              new_job.max_attempts, new_job.lease_ttl_sec, new_job.producer, None, new_job.timeout_sec,
              new_job.chain_next_json]
    while new_job.restartable:
        rows = runner.fetch(sql("insert_restartable_job"), params)
        if not rows:  # a queued job of the key with another task or queue
            rows = runner.fetch(sql("get_queued_restartable_job"), [new_job.lock_key])
        if rows:  # else it was claimed between the two statements: trigger again
            job = _job(rows[0])
            JobManager.check_restart_target(request, job, created=bool(rows[0].get("created")))
            return job
    while True:
        rows = runner.fetch(sql("insert_job"), params)
        if rows:
            metrics.JOBS_ENQUEUED.labels(request.queue, request.task).inc()
            return inserted_job(new_job, _as_uuid(new_job.job_id), rows[0])
        existing = runner.fetch(sql("get_job_by_idempotency_key"), [new_job.idempotency_key, new_job.args_json])
        if existing:  # else the conflicting row was deleted between the two statements: insert again
            job = _job(existing[0])
            if request.unique_for_sec is None:
                JobManager._check_same_request(request, new_job, job, bool(existing[0]["same_args"]))
            return job


class _CallerConnection:
    """Runs a `$n` statement on a psycopg 3 connection or a SQLAlchemy sync Connection/Session,
    inside the caller's transaction (SQLAlchemy: through the connection the Session's transaction
    uses, never a raw driver connection that could be outside it)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.kind = _kind_of(conn)

    def fetch(self, query: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        if self.kind == "psycopg":
            from psycopg.rows import dict_row

            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(_convert(query, "pyformat"), _params("pyformat", query, params))
                return [dict(row) for row in cur.fetchall()] if cur.description else []
        conn = self.conn.connection() if self.kind == "sqlalchemy_session" else self.conn
        style = conn.dialect.paramstyle
        result = conn.exec_driver_sql(_convert(query, style), _params(style, query, params))
        return [dict(row) for row in result.mappings()] if result.returns_rows else []


def _kind_of(conn: Any) -> str:
    try:
        import psycopg
    except ImportError:  # the `sync` extra is not installed: only SQLAlchemy connections can be given
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and isinstance(conn, psycopg.Connection):
        return "psycopg"
    try:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session
    except ImportError:  # pragma: no cover - sqlalchemy is a dependency
        Connection = Session = ()  # type: ignore[assignment,misc]
    if isinstance(conn, Session):
        return "sqlalchemy_session"
    if isinstance(conn, Connection):
        return "sqlalchemy"
    raise TypeError(
        "conn must be a psycopg 3 Connection or a SQLAlchemy sync Connection/Session, got "
        f"{type(conn).__module__}.{type(conn).__name__} (an asyncpg or SQLAlchemy async connection goes "
        "to the async App.enqueue)")


def _scan(query: str) -> Iterator[tuple[str, str]]:
    """The statement as ("text" | "param", piece) tokens, with `--` comments dropped; `$n` inside
    quotes or comments is not a parameter."""
    i, n, start = 0, len(query), 0
    while i < n:
        ch = query[i]
        if ch == "'" or ch == '"':
            end = query.find(ch, i + 1)
            while end != -1 and end + 1 < n and query[end + 1] == ch:  # doubled quote inside
                end = query.find(ch, end + 2)
            i = n if end == -1 else end + 1
        elif query.startswith("--", i):
            yield "text", query[start:i]
            end = query.find("\n", i)
            i = start = n if end == -1 else end
        elif ch == "$" and i + 1 < n and query[i + 1].isdigit() and (i == 0 or not _ident(query[i - 1])):
            yield "text", query[start:i]
            j = i + 1
            while j < n and query[j].isdigit():
                j += 1
            yield "param", query[i + 1:j]
            i = start = j
        else:
            i += 1
    yield "text", query[start:]


def _ident(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _convert(query: str, paramstyle: str) -> str:
    """`$n` → the driver's placeholder. `pyformat`: %(pn)s, `format`: %s (in order of appearance),
    `named`: :pn; `%` is doubled where the driver reads it."""
    if paramstyle not in ("pyformat", "format", "named"):
        raise TypeError(f"the connection's driver uses the {paramstyle!r} paramstyle; "
                        "pyformat, format and named are supported")
    out: list[str] = []
    for kind, piece in _scan(query):
        if kind == "param":
            out.append({"pyformat": f"%(p{piece})s", "format": "%s", "named": f":p{piece}"}[paramstyle])
        else:
            out.append(piece.replace("%", "%%") if paramstyle != "named" else piece)
    return "".join(out)


def _params(paramstyle: str, query: str, params: Sequence[Any]) -> Any:
    if paramstyle == "format":
        return tuple(params[int(piece) - 1] for kind, piece in _scan(query) if kind == "param")
    return {f"p{i}": value for i, value in enumerate(params, start=1)}


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _job(row: dict[str, Any]) -> Job:
    """A `dl_jobs` row as the caller's driver decoded it (jsonb may be text, uuid a string)."""
    row["job_id"] = _as_uuid(row["job_id"])
    row["args"] = json_value(row.get("args"))
    row["progress"] = json_value(row.get("progress"))
    return Job.from_row(row)
