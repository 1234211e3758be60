"""Limits per task of a queue (issue 21, 0027): a task's concurrency and rate across every node,
declared with `@pipeline(limits=...)` or set at run time (`configure_task`), on one node of real
workers (in-process, real PostgreSQL), checked by what the pipelines recorded from inside their runs
(test_runs) and by the starts the gate counted (dl_task_starts). The race of three real node
processes is test_task_limits_nodes.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from dataloader import App, Queue, Settings
from dataloader.exceptions import ValidationFailed
from dataloader.model.flow import TaskSettings, task_settings_from_declaration
from dataloader.storage.queue_connection import QueueConnection
from dataloader.workers.pipelines.registry import PipelineRegistry, load_pipeline_modules, registry
from tests.flow.test_limits import drain, max_in_window, max_overlap
from tests.support.engine import enqueue

SLEEP, OTHER = "test.recorded_sleep", "test.recorded_other"


@pytest.fixture
async def app(db, dsn: str) -> AsyncIterator[App]:
    app = await App(Settings(db_dsn=dsn, workers=[], poll_fallback_sec=30, pipeline_modules="tests.support.pipelines")
                    ).open()
    try:
        yield app
    finally:
        await app.close()


def _queue(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _runs(db, ids):
    return await db.fetch("SELECT r.job_id, r.started_at, r.ended_at, j.task FROM test_runs r "
                          "JOIN dl_jobs j USING (job_id) WHERE r.job_id = ANY($1) ORDER BY r.started_at", ids)


async def test_a_task_concurrency_holds_and_the_queues_other_tasks_go_on(app, db, dsn):
    queue = _queue("tconc")
    await app.configure_task(queue, SLEEP, concurrency=2)
    limited = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.3, "chunks": 3}, queue=queue,
                             lock_key=f"a{i}") for i in range(8)]
    other = [await enqueue(db, OTHER, args={"dsn": dsn, "seconds": 0.3, "chunks": 3}, queue=queue,
                           lock_key=f"b{i}") for i in range(4)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, limited + other, 30)
    runs = await _runs(db, limited + other)
    assert len(runs) == 12
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == SLEEP]) == 2
    # the other task was not held back behind the limited one's backlog: all four ran at once
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == OTHER]) == 4


async def test_a_task_rate_holds_in_every_window(app, db, dsn):
    queue = _queue("trate")
    await app.configure_task(queue, SLEEP, rate_limit=3, rate_period_sec=0.5)
    ids = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(11)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, ids, 30)
    counted = await db.fetch("SELECT s.started_at AS counted, r.started_at AS ran FROM dl_task_starts s "
                             "JOIN test_runs r USING (job_id) WHERE s.queue = $1 AND s.task = $2", queue, SLEEP)
    assert len(counted) == 11, "every run was counted as a start of the task, once"
    assert all(r["ran"] >= r["counted"] for r in counted)
    starts = [r["counted"] for r in counted]
    assert max_in_window(starts, 0.5) == 3
    assert (max(starts) - min(starts)).total_seconds() >= 1.5  # 11 starts at 3 per 0.5 s: four windows


async def test_a_task_limit_and_a_queue_limit_both_hold(app, db, dsn):
    queue = _queue("tboth")
    await app.configure_queue(queue, concurrency=3)
    await app.configure_task(queue, SLEEP, concurrency=1)
    limited = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                             lock_key=f"a{i}") for i in range(4)]
    other = [await enqueue(db, OTHER, args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                           lock_key=f"b{i}") for i in range(8)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, limited + other, 30)
    runs = await _runs(db, limited + other)
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == SLEEP]) == 1
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs]) == 3


async def test_held_back_jobs_of_a_task_show_and_clearing_its_limit_wakes_them(app, db, dsn):
    queue = _queue("theld")
    await app.configure_task(queue, SLEEP, concurrency=1)
    ids = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 5, "chunks": 50}, queue=queue,
                         lock_key=f"k{i}") for i in range(3)]

    async def running(n: int) -> bool:
        return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'running'",
                                 ids) == n

    async with app.running(queues=[Queue(queue, 4)], reaper=False):
        from tests.conftest import wait_until
        await wait_until(lambda: running(1), timeout=10, message="one job of the task runs")
        state = {q.queue: q for q in await app.queues()}[queue]
        task = state.task_limits[SLEEP]
        assert (task.settings.concurrency, task.settings_source, task.running, task.runnable) == (1, "runtime", 1, 2)
        assert task.held_back == {"concurrency": 2, "rate": 0}
        assert state.to_dict()["tasks"][SLEEP]["held_back"]["concurrency"] == 2
        # the worker's first claim took the three jobs as candidates; the gate held two back
        from prometheus_client import generate_latest
        counted = f'dl_task_held_back_total{{limit="concurrency",queue="{queue}",task="{SLEEP}"}}'
        assert counted in generate_latest().decode()
        cleared = await app.configure_task(queue, SLEEP, concurrency=None)  # its NOTIFY wakes the held jobs
        assert cleared.task_limits == {}
        await wait_until(lambda: running(3), timeout=5, message="the held jobs start once the limit is cleared")
        for job_id in ids:
            await app.cancel(job_id)


async def test_the_plain_claim_leaves_a_queue_with_a_limited_task_and_takes_it_back_once_cleared(app, db):
    queue = _queue("tpath")
    async with app.pool.acquire() as conn:
        conn_q = QueueConnection(conn)
        await app.configure_task(queue, SLEEP, concurrency=1)
        await enqueue(db, OTHER, queue=queue, lock_key="x")
        assert (await conn_q.claim(queue, "w", 4)).candidates == 0  # the plain claim leaves it out
        assert (await conn_q.next_due(queue)).limited is True
        await app.configure_task(queue, SLEEP, concurrency=None)
        assert (await conn_q.next_due(queue)).limited is False
        assert await db.fetchval("SELECT task_limited FROM dl_queue_flow WHERE queue = $1", queue) is False
        batch = await conn_q.claim(queue, "w", 4)
        assert len(batch.claimed) == 1
        await conn.execute("SELECT pg_advisory_unlock_all()")


async def test_a_declared_task_limit_applies_in_the_served_queues_and_a_runtime_one_wins(db, dsn):
    queue, untouched = _queue("tdecl"), _queue("tdecl-other")
    load_pipeline_modules(["tests.support.pipelines"])
    own = PipelineRegistry()
    own.register(SLEEP, registry.get(SLEEP).func, limits={"concurrency": 2, "rate": "10/1s"})
    own.register(OTHER, registry.get(OTHER).func)
    app = await App(Settings(db_dsn=dsn, workers=[]), pipelines=own).open()
    try:
        async with app.running(queues=[Queue(queue, 2)], reaper=False):
            pass
        state = {q.queue: q for q in await app.queues()}[queue]
        assert state.task_limits[SLEEP].settings == TaskSettings(2, 10, 1.0)
        assert state.task_limits[SLEEP].settings_source == "declared"
        assert OTHER not in state.task_limits and untouched not in {q.queue for q in await app.queues()}
        await app.configure_task(queue, SLEEP, concurrency=5)  # run time wins, and persists
        async with app.running(queues=[Queue(queue, 2)], reaper=False):
            pass
        state = {q.queue: q for q in await app.queues()}[queue]
        assert (state.task_limits[SLEEP].settings, state.task_limits[SLEEP].settings_source) == (
            TaskSettings(5, 10, 1.0), "runtime")
    finally:
        await app.close()


@pytest.mark.parametrize("changes, words", [
    ({"partition_concurrency": 2}, "partition_concurrency: not a task limit"),
    ({"fair_share": True}, "fair_share: not a task limit"),
    ({"concurrency": 0}, "concurrency: must be between 1 and 1000000"),
    ({"concurrency": "3"}, "concurrency: must be an integer or null"),
    ({"rate_limit": 100_001}, "rate_limit: must be between 1 and 100000"),
    ({"rate_period_sec": 0.001, "rate_limit": 1}, "rate_period_sec: must be between 0.01 and 86400 seconds"),
    ({"rate_period_sec": 2}, "rate_period_sec: needs rate_limit"),
    ({}, "nothing to change"),
])
async def test_a_bad_task_limit_is_refused_and_nothing_is_written(app, db, changes, words):
    queue = _queue("tbad")
    with pytest.raises(ValidationFailed, match=words):
        await app.configure_task(queue, SLEEP, **changes)
    assert await db.fetchval("SELECT count(*) FROM dl_task_flow WHERE queue = $1", queue) == 0
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


@pytest.mark.parametrize("queue, task", [("", SLEEP), ("q", ""), ("q", " "), ("q", "x" * 201), ("q", "a\x00b")])
async def test_a_bad_queue_or_task_name_is_refused(app, queue, task):
    with pytest.raises(ValidationFailed):
        await app.configure_task(queue, task, concurrency=1)


@pytest.mark.parametrize("declared, words", [
    ({"partition_rate": "1/s"}, "partition_rate: not a task limit"),
    ({"concurrency": -1}, "concurrency: must be between"),
    ({"rate": "fast"}, "rate: must be a rate"),
    ("3", "limits: must be an object"),
])
def test_a_bad_declared_task_limit_fails_at_the_decorator(declared, words):
    from dataloader import pipeline

    with pytest.raises(ValidationFailed, match=words):
        pipeline("test.never_registered", limits=declared)
    assert "test.never_registered" not in registry
    with pytest.raises(ValidationFailed, match=words):
        task_settings_from_declaration(declared)


async def test_the_task_limit_metrics_read_the_database(app, db):
    from prometheus_client import generate_latest

    queue = _queue("tmetrics")
    await app.configure_task(queue, SLEEP, concurrency=4, rate_limit=7)
    await enqueue(db, SLEEP, queue=queue)
    await app.flow.refresh_metrics()
    text = generate_latest().decode()
    assert f'dl_task_limit{{limit="concurrency",queue="{queue}",task="{SLEEP}"}} 4.0' in text
    assert f'dl_task_limit{{limit="rate",queue="{queue}",task="{SLEEP}"}} 7.0' in text
    assert f'dl_task_in_use{{limit="concurrency",queue="{queue}",task="{SLEEP}"}} 0.0' in text
    assert f'dl_task_held_back_jobs{{limit="concurrency",queue="{queue}",task="{SLEEP}"}} 0.0' in text
    await app.configure_task(queue, SLEEP, concurrency=None, rate_limit=None)
    await app.flow.refresh_metrics()
    assert f'queue="{queue}"' not in generate_latest().decode().split("dl_task_limit", 1)[1].split("# HELP", 1)[0]


async def test_a_task_limit_holds_in_a_fair_queue_too(app, db, dsn):
    """The fair claim carries the same gate: a task's limit holds across its tenants."""
    queue = _queue("tfair")
    await app.configure_queue(queue, fair_share=True)
    await app.configure_task(queue, SLEEP, concurrency=2)
    limited = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                             lock_key=f"a{i}", partition_key=f"t{i % 4}") for i in range(8)]
    other = [await enqueue(db, OTHER, args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                           lock_key=f"b{i}", partition_key=f"t{i % 4}") for i in range(4)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, limited + other, 30)
    runs = await _runs(db, limited + other)
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == SLEEP]) == 2
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == OTHER]) == 4


def test_sync_app_configures_a_task_too(db, dsn):
    from dataloader import SyncApp

    queue = _queue("tsync")
    with SyncApp(Settings(db_dsn=dsn, workers=[])) as app:
        state = app.configure_task(queue, SLEEP, rate_limit=4)
        assert state.task_limits[SLEEP].settings == TaskSettings(None, 4, 1.0)
        assert app.configure_task(queue, SLEEP, rate_limit=None).task_limits == {}


async def test_the_scaling_signal_counts_a_tasks_concurrency_cap(app, db):
    queue = _queue("tscale")
    await app.configure_task(queue, SLEEP, concurrency=2)
    ids = [await enqueue(db, SLEEP, queue=queue, lock_key=f"k{i}") for i in range(30)]
    # two of them run (as a claim leaves them): the task is at its cap, the other 28 are held back
    await db.execute("UPDATE dl_jobs SET status = 'running', started_at = now(), attempt = 1, "
                     "lease_expires_at = now() + interval '1 hour', heartbeat_at = now() WHERE job_id = ANY($1)",
                     ids[:2])
    scaling = await app.queue_scaling(queue)
    # without the cap: the two busy slots doubled (4); nothing more of the task can start
    assert (scaling.desired_workers, scaling.reason) == (2, "backlog, no throughput yet, capped by task concurrency")
    await app.configure_task(queue, SLEEP, concurrency=None)
    assert (await app.queue_scaling(queue)).desired_workers == 4


async def test_a_task_rate_has_no_burst_after_a_restart(app, db, dsn):
    """The window's starts are rows: a node that starts (or restarts) while the task's window is
    full starts nothing of it until the window opens, whatever it remembers (nothing)."""
    queue = _queue("trestart")
    await app.configure_task(queue, SLEEP, rate_limit=3, rate_period_sec=2)
    full_at = await db.fetchval("SELECT clock_timestamp()")
    await db.execute("INSERT INTO dl_task_starts (queue, task, job_id, started_at) "
                     "SELECT $1, $2, gen_random_uuid(), $3 FROM generate_series(1, 3)", queue, SLEEP, full_at)
    ids = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(2)]
    async with app.running(queues=[Queue(queue, 4)], reaper=False):
        await drain(db, ids, 20)
    first = await db.fetchval("SELECT min(started_at) FROM dl_task_starts WHERE queue = $1 AND job_id = ANY($2)",
                              queue, ids)
    assert (first - full_at).total_seconds() >= 2.0, "no start before the full window opened"


async def test_task_limits_declared_in_settings_win_over_the_pipelines_and_a_runtime_change_over_both(db, dsn):
    """DL_TASK_LIMITS_JSON names (queue, task) pairs, served or not; over `@pipeline(limits=...)` of
    the same task in a served queue; a runtime change wins over both at the next start."""
    queue, elsewhere = _queue("tjson"), _queue("tjson-elsewhere")
    load_pipeline_modules(["tests.support.pipelines"])
    own = PipelineRegistry()
    own.register(SLEEP, registry.get(SLEEP).func, limits={"concurrency": 2})
    settings = Settings(db_dsn=dsn, workers=[], task_limits_json={queue: {SLEEP: {"concurrency": 7}},
                                                                  elsewhere: {OTHER: {"rate": "5/1s"}}})
    app = await App(settings, pipelines=own).open()
    try:
        async with app.running(queues=[Queue(queue, 2)], reaper=False):
            pass
        state = {q.queue: q for q in await app.queues()}
        assert state[queue].task_limits[SLEEP].settings == TaskSettings(7, None, None)
        assert state[elsewhere].task_limits[OTHER].settings == TaskSettings(None, 5, 1.0)
        await app.configure_task(queue, SLEEP, concurrency=1)
        async with app.running(queues=[Queue(queue, 2)], reaper=False):
            pass
        state = {q.queue: q for q in await app.queues()}
        assert (state[queue].task_limits[SLEEP].settings.concurrency,
                state[queue].task_limits[SLEEP].settings_source) == (1, "runtime")
    finally:
        await app.close()


async def test_clearing_a_task_rate_removes_its_window_of_starts_and_a_declaration_without_one_does_too(
        app, db, dsn):
    """The gate prunes a task's dl_task_starts only while the task has a rate: the run-time change
    or the declaration that takes the rate away removes them, and nothing of another task."""
    queue = _queue("tclear")
    ids = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(3)]
    await app.configure_task(queue, SLEEP, rate_limit=100, rate_period_sec=60)
    await app.configure_task(queue, OTHER, rate_limit=100, rate_period_sec=60)
    await db.execute("INSERT INTO dl_task_starts (queue, task, job_id, started_at) "
                     "VALUES ($1, $2, gen_random_uuid(), now())", queue, OTHER)
    async with app.running(queues=[Queue(queue, 4)], reaper=False):
        await drain(db, ids, 20)

    async def starts(task: str) -> int:
        return await db.fetchval("SELECT count(*) FROM dl_task_starts WHERE queue = $1 AND task = $2", queue, task)

    assert await starts(SLEEP) == 3
    await app.configure_task(queue, SLEEP, rate_limit=50)  # a rate changed keeps its window
    assert await starts(SLEEP) == 3
    await app.configure_task(queue, SLEEP, rate_limit=None)
    assert (await starts(SLEEP), await starts(OTHER)) == (0, 1)

    # a declaration (at a node's start) that drops the rate of a declared task does the same
    await db.execute("UPDATE dl_task_flow SET settings_source = 'declared' WHERE queue = $1 AND task = $2",
                     queue, OTHER)
    own = PipelineRegistry()
    own.register(OTHER, registry.get(OTHER).func, limits={"concurrency": 3})
    declaring = await App(Settings(db_dsn=dsn, workers=[]), pipelines=own).open()
    try:
        async with declaring.running(queues=[Queue(queue, 1)], reaper=False):
            pass
    finally:
        await declaring.close()
    assert await starts(OTHER) == 0
    row = await db.fetchrow("SELECT concurrency, rate_limit FROM dl_task_flow WHERE queue = $1 AND task = $2",
                            queue, OTHER)
    assert (row["concurrency"], row["rate_limit"]) == (3, None)
