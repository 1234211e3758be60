"""`dataloader.SyncApp`, from plain (sync) test functions against a real PostgreSQL: the facade
gives App's answers and errors, works from several threads at once on one App, and enqueues inside
the caller's own sync transaction (psycopg 3, SQLAlchemy Connection and Session), where the job
and its journal row must exist if and only if that transaction commits — and a worker then runs it."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import asyncpg
import psycopg
import pytest
import sqlalchemy
from sqlalchemy.orm import Session

import dataloader
from dataloader import (
    ArgsTooLarge,
    IdempotencyConflict,
    Job,
    JobAlreadyFinished,
    JobNotFound,
    JobStatus,
    Queue,
    Settings,
    SyncApp,
)
from dataloader.testing import drain_sync

BUSINESS_DDL = "CREATE TABLE IF NOT EXISTS sync_orders (id int PRIMARY KEY)"


def settings_for(dsn: str) -> Settings:
    return Settings(db_dsn=dsn, workers=[Queue("q", 2)], pipeline_modules="tests.support.pipelines",
                    heartbeat_sec=0.2, poll_fallback_sec=1, shutdown_timeout_sec=2, max_args_bytes=1000)


@pytest.fixture
def sync_app(db: asyncpg.Pool, dsn: str) -> Iterator[SyncApp]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BUSINESS_DDL)
        conn.execute("TRUNCATE sync_orders")
    with SyncApp(settings_for(dsn)) as app:
        yield app


def counts(dsn: str, job_id: uuid.UUID) -> tuple[int, int]:
    """(rows in dl_jobs, rows in dl_job_events) for the job, read on a separate connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        jobs = conn.execute("SELECT count(*) FROM dl_jobs WHERE job_id = %s", (job_id,)).fetchone()
        events = conn.execute("SELECT count(*) FROM dl_job_events WHERE job_id = %s", (job_id,)).fetchone()
    assert jobs is not None and events is not None
    return jobs[0], events[0]


def order_count(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM sync_orders").fetchone()
    assert row is not None
    return row[0]


# -- the plain facade ----------------------------------------------------------------------------


def test_sync_app_is_part_of_the_public_api():
    assert "SyncApp" in dataloader.__all__ and dataloader.SyncApp is SyncApp


def test_enqueue_get_list_cancel_retry_events_from_a_sync_function(sync_app: SyncApp):
    job = sync_app.enqueue("dl.noop", {"n": 1}, queue="q", lock_key="k", priority=5)
    assert isinstance(job, Job) and job.status == JobStatus.queued and job.args == {"n": 1}
    assert sync_app.get(job.id) == job
    assert sync_app.get(str(job.id)).id == job.id

    page = sync_app.list(queue="q", status="queued")
    assert [j.id for j in page.jobs] == [job.id] and page.next_cursor is None

    canceled = sync_app.cancel(job.id)
    assert canceled.status == JobStatus.canceled
    with pytest.raises(JobAlreadyFinished):
        sync_app.cancel(job.id)
    retried = sync_app.retry(job.id)
    assert retried.status == JobStatus.queued
    assert [e.kind for e in sync_app.events(job.id)] == ["queued", "canceled", "requeue"]

    with pytest.raises(JobNotFound):
        sync_app.get(uuid.uuid4())
    same = sync_app.enqueue("dl.noop", {"n": 1}, queue="q", lock_key="k2", idempotency_key="once")
    assert sync_app.enqueue("dl.noop", {"n": 1}, queue="q", lock_key="k2", idempotency_key="once").id == same.id
    with pytest.raises(IdempotencyConflict):
        sync_app.enqueue("dl.noop", {"n": 2}, queue="q", lock_key="k2", idempotency_key="once")

    ids = sync_app.enqueue_many([{"task": "dl.noop", "queue": "q"}, {"task": "dl.noop", "queue": "q"}])
    assert len(ids) == 2 and all(sync_app.get(i).status == JobStatus.queued for i in ids)

    result = drain_sync(sync_app, "q", timeout=30)
    assert {j.id for j in result.succeeded} == {job.id, same.id, *ids}


def test_two_threads_share_one_sync_app(sync_app: SyncApp):
    start = threading.Barrier(2)
    found: dict[str, list[Job]] = {}
    errors: list[BaseException] = []

    def producer(name: str) -> None:
        try:
            start.wait(timeout=10)
            jobs = [sync_app.enqueue("dl.noop", {"by": name, "i": i}, queue="q") for i in range(20)]
            found[name] = [sync_app.get(j.id) for j in jobs]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(found) == ["a", "b"]
    for name, jobs in found.items():
        assert [j.args for j in jobs] == [{"by": name, "i": i} for i in range(20)]
    listed = sync_app.list(queue="q", limit=100).jobs
    assert len(listed) == 40 and len({j.id for j in listed}) == 40


def test_misuse_is_a_clear_error_not_a_hang(sync_app: SyncApp, dsn: str):
    closed = SyncApp(settings_for(dsn))
    with pytest.raises(RuntimeError, match="not open"):
        closed.get(uuid.uuid4())

    async def calls_the_facade_on_its_own_loop() -> Job:
        return sync_app.get(uuid.uuid4())  # would wait for itself forever

    with pytest.raises(RuntimeError, match="own event loop thread"):
        sync_app.run(calls_the_facade_on_its_own_loop())

    with pytest.raises(RuntimeError, match="already open"):
        sync_app.open()


# -- enqueue in the caller's sync transaction ----------------------------------------------------


@contextmanager
def psycopg_tx(dsn: str, commit: bool) -> Iterator[Any]:
    conn = psycopg.connect(dsn)
    try:
        yield conn
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()


@contextmanager
def psycopg_client_cursor_tx(dsn: str, commit: bool) -> Iterator[Any]:
    """How Django (>= 4.2, psycopg 3 backend) holds its connection: client-side binding cursors."""
    conn = psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor)
    try:
        yield conn
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()


@contextmanager
def sqlalchemy_connection_tx(dsn: str, commit: bool) -> Iterator[Any]:
    engine = sqlalchemy.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            yield conn
            conn.commit() if commit else conn.rollback()
    finally:
        engine.dispose()


@contextmanager
def sqlalchemy_session_tx(dsn: str, commit: bool) -> Iterator[Any]:
    engine = sqlalchemy.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with Session(engine) as session:
            yield session
            session.commit() if commit else session.rollback()
    finally:
        engine.dispose()


def business_insert(conn: Any, order_id: int) -> None:
    """The caller's own write in the same transaction."""
    if isinstance(conn, psycopg.Connection):
        conn.execute("INSERT INTO sync_orders (id) VALUES (%s)", (order_id,))
    else:
        conn.execute(sqlalchemy.text("INSERT INTO sync_orders (id) VALUES (:id)"), {"id": order_id})


TRANSACTIONS: dict[str, Callable[[str, bool], AbstractContextManager[Any]]] = {
    "psycopg": psycopg_tx,
    "psycopg-client-cursor": psycopg_client_cursor_tx,
    "sqlalchemy-connection": sqlalchemy_connection_tx,
    "sqlalchemy-session": sqlalchemy_session_tx,
}


@pytest.mark.parametrize("kind", list(TRANSACTIONS))
def test_a_committed_transaction_has_its_job_and_a_worker_runs_it(sync_app: SyncApp, dsn: str, kind: str):
    with TRANSACTIONS[kind](dsn, True) as conn:
        business_insert(conn, 1)
        job = sync_app.enqueue("dl.noop", {"order": 1}, queue="q", lock_key="order-1", conn=conn)
        assert job.status == JobStatus.queued and job.args == {"order": 1} and job.lock_key == "order-1"
        assert counts(dsn, job.id) == (0, 0)  # not visible outside the transaction before the commit

    assert counts(dsn, job.id) == (1, 1) and order_count(dsn) == 1
    assert sync_app.get(job.id) == job
    assert [e.kind for e in sync_app.events(job.id)] == ["queued"]

    result = drain_sync(sync_app, "q", timeout=30)
    assert [j.id for j in result.succeeded] == [job.id]


@pytest.mark.parametrize("kind", list(TRANSACTIONS))
def test_a_rolled_back_transaction_leaves_no_job_and_no_journal_row(sync_app: SyncApp, dsn: str, kind: str):
    with TRANSACTIONS[kind](dsn, False) as conn:
        business_insert(conn, 2)
        job = sync_app.enqueue("dl.noop", {"order": 2}, queue="q", conn=conn)
        ids = sync_app.enqueue_many([{"task": "dl.noop", "queue": "q"}], conn=conn)

    assert counts(dsn, job.id) == (0, 0) and counts(dsn, ids[0]) == (0, 0)
    assert order_count(dsn) == 0
    with pytest.raises(JobNotFound):
        sync_app.get(job.id)
    assert drain_sync(sync_app, "q", timeout=30).jobs == []


@pytest.mark.parametrize("kind", list(TRANSACTIONS))
def test_idempotency_and_batches_in_the_callers_transaction(sync_app: SyncApp, dsn: str, kind: str):
    with TRANSACTIONS[kind](dsn, True) as conn:
        first = sync_app.enqueue("dl.noop", {"a": 1.0}, queue="q", idempotency_key="idem", conn=conn)
        # The same request again (1.0 and 1 are one jsonb number): the same job, nothing new.
        again = sync_app.enqueue("dl.noop", {"a": 1}, queue="q", lock_key=first.lock_key,
                                 idempotency_key="idem", conn=conn)
        assert again.id == first.id
        with pytest.raises(IdempotencyConflict, match="args"):
            sync_app.enqueue("dl.noop", {"a": 2}, queue="q", lock_key=first.lock_key,
                             idempotency_key="idem", conn=conn)
        ids = sync_app.enqueue_many(
            [{"task": "dl.noop", "queue": "q", "idempotency_key": "idem"},  # known: skipped
             {"task": "dl.noop", "queue": "q", "args": {"i": 1}, "delay": 0.5},
             dataloader.JobRequest(task="dl.noop", queue="q", lock_key="batch")], conn=conn)
        assert len(ids) == 2 and first.id not in ids

    assert counts(dsn, first.id) == (1, 1)
    assert [sync_app.get(i).args for i in ids] == [{"i": 1}, {}]
    result = drain_sync(sync_app, "q", timeout=30)
    assert {j.id for j in result.succeeded} == {first.id, *ids}


@pytest.mark.parametrize("kind", list(TRANSACTIONS))
def test_queue_patterns_in_the_callers_transaction(sync_app: SyncApp, dsn: str, kind: str):
    """Restartable, unique and chained jobs take the same paths on a caller's sync connection."""
    with TRANSACTIONS[kind](dsn, True) as conn:
        first = sync_app.enqueue("dl.noop", {"v": 1}, queue="q", lock_key="re", restartable=True, conn=conn)
        again = sync_app.enqueue("dl.noop", {"v": 2}, queue="q", lock_key="re", restartable=True, conn=conn)
        assert again.id == first.id and again.args == {"v": 2}
        with pytest.raises(dataloader.RestartConflict):
            sync_app.enqueue("dl.sleep", {}, queue="q", lock_key="re", restartable=True, conn=conn)
        unique = sync_app.enqueue("dl.noop", {"u": 1}, queue="q", unique_for=60, conn=conn)
        assert sync_app.enqueue("dl.noop", {"u": 1}, queue="q", unique_for=60, conn=conn).id == unique.id
        chained = sync_app.enqueue("dl.noop", queue="q", then=[dataloader.Stage("dl.noop")], conn=conn)
        assert chained.chain_id == chained.id

    result = drain_sync(sync_app, "q", timeout=30)
    assert {j.id for j in result.succeeded} >= {first.id, unique.id, chained.id}
    assert [j.task for j in sync_app.chain(chained.id).jobs] == ["dl.noop", "dl.noop"]


def test_the_transactional_path_validates_like_the_app_and_refuses_foreign_connections(
        sync_app: SyncApp, dsn: str):
    with psycopg_tx(dsn, True) as conn:
        with pytest.raises(ArgsTooLarge):
            sync_app.enqueue("dl.noop", {"blob": "x" * 2000}, queue="q", conn=conn)
        with pytest.raises(ValueError, match="available_at or delay"):
            sync_app.enqueue("dl.noop", queue="q", delay=1, available_at=dt.datetime.now(dt.UTC), conn=conn)
        with pytest.raises(TypeError, match="psycopg 3 Connection"):
            sync_app.enqueue("dl.noop", queue="q", conn=object())
    assert sync_app.list(queue="q").jobs == []
