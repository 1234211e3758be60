"""The public Python API (`dataloader.App`) against a real PostgreSQL: what a user does with it,
including enqueueing inside their own transaction (asyncpg, SQLAlchemy AsyncConnection and
AsyncSession), where the job must exist if and only if the transaction commits."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text

import dataloader
from dataloader import (
    App,
    ConfigError,
    Job,
    JobNotRetryable,
    JobStatus,
    Queue,
    SchemaNotReady,
    Settings,
    UnknownTask,
)
from tests.conftest import wait_until
from tests.support.database import create_database, drop_database

BUSINESS_DDL = "CREATE TABLE IF NOT EXISTS test_orders (id int PRIMARY KEY)"


def settings_for(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {"db_dsn": dsn, "workers": [Queue("app-q", 2)], "heartbeat_sec": 0.2,
                                 "poll_fallback_sec": 1, "pipeline_modules": "tests.support.pipelines"}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def app(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    await db.execute(BUSINESS_DDL)
    await db.execute("TRUNCATE test_orders")
    async with App(settings_for(dsn)) as opened:
        yield opened


async def _count(db: asyncpg.Pool, job_id: uuid.UUID) -> tuple[int, int]:
    return (await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id),
            await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1", job_id))


def test_the_public_surface_is_importable_from_dataloader():
    for name in ("App", "Settings", "Queue", "Job", "JobStatus", "JobPage", "JobEvent", "pipeline",
                 "JobContext", "FatalError", "JobNotFound", "IdempotencyConflict", "UnknownTask"):
        assert name in dataloader.__all__ and hasattr(dataloader, name), name


async def test_a_library_app_without_a_dsn_is_a_clear_error_never_a_private_database(tmp_path):
    app = App(Settings(db_dsn=None, data_dir=tmp_path / "pgdata"))
    with pytest.raises(ConfigError, match=r"DL_DB_DSN: is not set.*App\.embedded"):
        await app.open()
    assert not (tmp_path / "pgdata").exists(), "no server may have been started"


async def test_a_database_that_was_never_migrated_is_refused_with_the_command_to_run(pg_server):
    fresh = await create_database(pg_server)
    try:
        with pytest.raises(SchemaNotReady, match="dataloader db upgrade"):
            await App(settings_for(fresh)).open()
        async with await App(settings_for(fresh)).open(migrate_schema=True) as app:
            assert (await app.enqueue("dl.noop")).status is JobStatus.queued
    finally:
        await drop_database(pg_server, fresh)


async def test_enqueue_returns_a_typed_job_with_sensible_defaults(app):
    before = dt.datetime.now(dt.UTC)
    job = await app.enqueue("dl.noop", {"x": 1}, delay=dt.timedelta(minutes=5))
    assert isinstance(job, Job) and job.status is JobStatus.queued
    assert (job.queue, job.task, job.args, job.attempt, job.max_attempts) == ("default", "dl.noop", {"x": 1}, 0, 5)
    assert job.lock_key == str(job.id), "the default lock_key is the job's own id (no serialization)"
    assert dt.timedelta(minutes=4) < job.available_at - before < dt.timedelta(minutes=6)
    assert job.producer == "python"
    again = await app.get(str(job.id))
    assert again == job
    with pytest.raises(ValueError, match="not both"):
        await app.enqueue("dl.noop", delay=1, available_at=dt.datetime.now(dt.UTC))


async def test_idempotent_enqueue_returns_the_same_job(app):
    first = await app.enqueue("dl.noop", {"a": [1.5, 1e300]}, idempotency_key="once")
    second = await app.enqueue("dl.noop", {"a": [1.5, 1e300]}, idempotency_key="once")
    assert first.id == second.id


async def test_the_job_enqueue_returns_is_the_row_stored(app, dsn):
    # insert_job.sql returns only what the database decided; the rest comes from the request
    # (repositories.inserted_job): alone, in a group, and on the caller's connection.
    calls = [{}, {"args": {"bb": 1, "a": [1.5, "x"], "n": None}, "idempotency_key": "k", "partition_key": "p",
                  "priority": 3, "max_attempts": 2, "lease_ttl_sec": 9, "timeout_sec": 5, "delay": 30},
             {"then": [dataloader.Stage("dl.noop")]}, {"available_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}]
    jobs = [await app.enqueue("dl.noop", queue="q", **kwargs) for kwargs in calls]
    jobs += await asyncio.gather(*(app.enqueue("dl.noop", {"i": i}, queue="q", lock_key=f"g{i}") for i in range(6)))
    conn = await asyncpg.connect(dsn)
    try:
        jobs.append(await app.enqueue("dl.noop", {"c": 1}, queue="q", then=[dataloader.Stage("dl.noop")], conn=conn))
    finally:
        await conn.close()
    for job in jobs:
        assert job == await app.get(job.id)
    assert jobs[1].args == {"bb": 1, "a": [1.5, "x"], "n": None} and jobs[2].chain_id == jobs[2].id


async def test_enqueue_many_inserts_in_one_statement_in_input_order(app, db):
    ids = await app.enqueue_many([{"task": "dl.noop", "args": {"i": i}, "priority": i} for i in range(5)])
    rows = {r["job_id"]: r["priority"] for r in await db.fetch("SELECT job_id, priority FROM dl_jobs")}
    assert [rows[i] for i in ids] == [0, 1, 2, 3, 4]


def _json(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value


_STORED = ("queue, task, args, idempotency_key, lock_key, partition_key, priority, available_at, max_attempts, "
           "lease_ttl_sec, timeout_sec, producer")


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("same", [False, True], ids=["mixed", "constant"])
async def test_enqueue_many_stores_each_items_own_columns(app, db, keyed, same):
    """A column with one value for the whole batch is sent once (insert_jobs_rows.sql's fills); a
    mixed column job by job. Either way each row holds what its item said, or the defaults."""
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    items = []
    for i in range(4):
        v = 0 if same else i
        item: dict = {"task": f"dl.t{v}", "args": {"v": v} if v else {}, "queue": f"q{v}",
                      "partition_key": f"p{v}" if v else "", "priority": 10 + v,
                      "max_attempts": 2 + v, "lease_ttl_sec": 30 + v}
        if v:
            item |= {"lock_key": f"k{v}", "available_at": at + dt.timedelta(seconds=v), "timeout_sec": v}
        if keyed:
            item["idempotency_key"] = f"key{i}"
        items.append(item)
    ids = await app.enqueue_many(items)
    assert len(ids) == 4
    rows = {r["job_id"]: r for r in await db.fetch(f"SELECT job_id, {_STORED} FROM dl_jobs")}
    for job_id, item in zip(ids, items, strict=True):
        row = rows[job_id]
        assert (row["queue"], row["task"], _json(row["args"]), row["partition_key"], row["priority"],
                row["max_attempts"], row["lease_ttl_sec"], row["producer"]) == (
            item["queue"], item["task"], item["args"], item["partition_key"], item["priority"],
            item["max_attempts"], item["lease_ttl_sec"], "python")
        assert row["lock_key"] == item.get("lock_key", str(job_id)), "no lock_key: the job's own id"
        assert row["idempotency_key"] == item.get("idempotency_key")
        assert row["timeout_sec"] == item.get("timeout_sec")
        if "available_at" in item:
            assert row["available_at"] == item["available_at"]
        else:
            assert row["available_at"] <= dt.datetime.now(dt.UTC)
    events = await db.fetch("SELECT job_id, payload FROM dl_job_events WHERE kind = 'queued'")
    assert {e["job_id"]: _json(e["payload"]) for e in events} == {
        job_id: {"task": item["task"]} for job_id, item in zip(ids, items, strict=True)}


async def test_enqueue_many_skips_known_and_repeated_keys_in_input_order(app, db):
    first = await app.enqueue_many([{"task": "dl.noop", "idempotency_key": "a"}])
    ids = await app.enqueue_many([{"task": "dl.noop", "idempotency_key": k, "priority": p}
                                  for p, k in enumerate(["b", "a", "c", "b", "d"])])
    assert len(ids) == 3
    stored = {r["job_id"]: (r["idempotency_key"], r["priority"])
              for r in await db.fetch("SELECT job_id, idempotency_key, priority FROM dl_jobs")}
    assert [stored[i] for i in ids] == [("b", 0), ("c", 2), ("d", 4)] and first[0] in stored
    same = await app.enqueue_many([{"task": "dl.noop", "idempotency_key": "z"} for _ in range(3)])
    assert len(same) == 1, "one key for the whole batch: one job"


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_enqueue_in_the_callers_asyncpg_transaction(app, db, dsn, outcome):
    conn = await asyncpg.connect(dsn)  # a plain connection of the user's, with no codecs of ours
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("INSERT INTO test_orders (id) VALUES (1)")
        job = await app.enqueue("dl.noop", {"order": 1}, queue="app-q", conn=conn)
        assert job.args == {"order": 1} and job.status is JobStatus.queued
        assert await _count(db, job.id) == (0, 0), "not visible before the caller commits"
        await (tx.commit() if outcome == "commit" else tx.rollback())
    finally:
        await conn.close()
    expected = (1, 1) if outcome == "commit" else (0, 0)
    assert await _count(db, job.id) == expected
    assert await db.fetchval("SELECT count(*) FROM test_orders") == expected[0]
    if outcome == "commit":
        async with app.running():
            await wait_until(lambda: _status_is(app, job.id, JobStatus.succeeded), timeout=60)


async def _status_is(app: App, job_id: uuid.UUID, status: JobStatus) -> bool:
    return (await app.get(job_id)).status is status


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_enqueue_in_the_callers_sqlalchemy_session(app, db, outcome):
    async with app.sessionmaker() as session:
        await session.execute(text("INSERT INTO test_orders (id) VALUES (2)"))
        job = await app.enqueue("dl.noop", {"order": 2}, conn=session)
        assert await _count(db, job.id) == (0, 0)
        await (session.commit() if outcome == "commit" else session.rollback())
    expected = (1, 1) if outcome == "commit" else (0, 0)
    assert await _count(db, job.id) == expected
    assert await db.fetchval("SELECT count(*) FROM test_orders") == expected[0]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_enqueue_in_the_callers_sqlalchemy_connection_even_before_its_first_statement(app, db, outcome):
    """SQLAlchemy begins lazily; the job is the first statement of the transaction here, and must
    still be part of it."""
    engine = app.sessionmaker.kw["bind"]
    async with engine.connect() as conn:
        trans = await conn.begin()
        job = await app.enqueue("dl.noop", conn=conn)
        await conn.execute(text("INSERT INTO test_orders (id) VALUES (3)"))
        await (trans.commit() if outcome == "commit" else trans.rollback())
    expected = (1, 1) if outcome == "commit" else (0, 0)
    assert await _count(db, job.id) == expected


async def test_enqueue_many_in_the_callers_transaction_rolls_back_with_it(app, db, dsn):
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            ids = await app.enqueue_many([{"task": "dl.noop"} for _ in range(3)], conn=conn)
            assert len(ids) == 3
            raise_after = True
            if raise_after:
                await conn.execute("SELECT 1/0")
    except asyncpg.DivisionByZeroError:
        pass
    finally:
        await conn.close()
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_a_wrong_conn_type_is_a_clear_type_error(app):
    with pytest.raises(TypeError, match="asyncpg connection or a SQLAlchemy"):
        await app.enqueue("dl.noop", conn=object())


async def test_unknown_task_is_accepted_unless_this_process_serves_its_queue(app):
    accepted = await app.enqueue("their.pipeline", queue="app-q")
    assert accepted.task == "their.pipeline"
    async with app.running(queues=[Queue("app-q", 1)]):
        assert app.served_queues() == frozenset({"app-q"})
        with pytest.raises(UnknownTask, match="serves queue 'app-q'"):
            await app.enqueue("their.pipeline", queue="app-q")
        assert (await app.enqueue("their.pipeline", queue="elsewhere")).queue == "elsewhere"
    assert app.served_queues() == frozenset()


async def test_retry_gives_a_failed_job_a_fresh_budget_and_keeps_the_attempt_counting(app, db):
    job = await app.enqueue("dl.fail", {"fatal": True}, queue="app-q", max_attempts=1)
    async with app.running():
        await wait_until(lambda: _status_is(app, job.id, JobStatus.failed), timeout=60)
    # retried with no worker running, so the job read back cannot have been claimed already
    retried = await app.retry(job.id)
    assert (retried.status, retried.attempt) == (JobStatus.queued, 1)
    async with app.running():
        await wait_until(lambda: _attempted_twice(app, job.id), timeout=60)
    final = await app.get(job.id)
    assert (final.status, final.attempt) == (JobStatus.failed, 2), "attempt keeps counting (it fences writes)"
    kinds = [(e.kind, (e.payload or {}).get("reason")) for e in await app.events(job.id)]
    assert ("requeue", "manual_retry") in kinds
    with pytest.raises(JobNotRetryable, match="only canceled, failed, lost"):
        await app.retry((await app.enqueue("dl.noop", {"later": True}, delay=3600)).id)


async def _attempted_twice(app: App, job_id: uuid.UUID) -> bool:
    job = await app.get(job_id)
    return job.attempt == 2 and job.status.finished


async def test_retry_of_a_job_with_attempts_left_uses_its_whole_budget_again(app):
    job = await app.enqueue("test.flaky", {"succeed_on": 99}, queue="app-q")  # pipeline max_attempts=3
    async with app.running():
        await wait_until(lambda: _status_is(app, job.id, JobStatus.failed), timeout=60)
        await app.retry(job.id)
        await wait_until(lambda: _attempt_is(app, job.id, 6), timeout=60)
    final = await app.get(job.id)
    assert (final.status, final.attempt) == (JobStatus.failed, 6), "three more attempts after the retry"


async def _attempt_is(app: App, job_id: uuid.UUID, attempt: int) -> bool:
    job = await app.get(job_id)
    return job.attempt == attempt and job.status.finished


async def test_list_pages_with_a_cursor_and_filters(app):
    ids = [(await app.enqueue("dl.noop", {"i": i}, queue="list-q")).id for i in range(5)]
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = await app.list(queue="list-q", status="queued", limit=2, cursor=cursor)
        seen += [job.id for job in page.jobs]
        assert all(job.args is None for job in page.jobs), "listings leave args out"
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    assert (await app.list(queue="list-q", status=[JobStatus.failed])).jobs == []


async def test_work_runs_until_stop_is_set(app):
    import asyncio

    job = await app.enqueue("dl.noop", queue="app-q")
    stop = asyncio.Event()
    worker = asyncio.create_task(app.work(stop))
    await wait_until(lambda: _status_is(app, job.id, JobStatus.succeeded), timeout=60)
    stop.set()
    await asyncio.wait_for(worker, 15)
    assert app.served_queues() == frozenset()


async def test_leaving_running_right_after_a_job_ends_stops_at_once(app, db):
    """Stops right after a finish used to hang one time in five: for the whole shutdown timeout
    when a wait swallowed its cancellation (Python 3.11's wait_for), or for a node heartbeat
    period when the stop's wake-up was consumed. The shutdown timeout here is 30 s: a stop that
    takes more than 5 s with nothing running is that bug."""
    import time

    for _ in range(12):
        job = await app.enqueue("dl.fail", {"fatal": True}, queue="app-q", max_attempts=1)
        running = app.running()
        await running.__aenter__()
        await wait_until(lambda: _status_is(app, job.id, JobStatus.failed), timeout=60)  # noqa: B023
        started = time.perf_counter()
        await running.__aexit__(None, None, None)
        assert time.perf_counter() - started < 5.0, "stopping with nothing running waited for a timeout"
