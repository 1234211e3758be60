"""`dataloader.testing`, as a user's test suite uses it.

`run_inline` needs no database: each test proves the inline runner drives one pipeline kind the
way the engine does (chunks, the stop at a chunk boundary, a cancel interrupting a coroutine, a
function that saw the stop and returned) and decides the outcome by the engine's rules. `drain`
runs the real engine against the test database: each test proves it stops exactly when the queue
has nothing left to do, and reports the jobs that finished, and only those."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, FatalError, JobContext, JobStatus, Queue, Settings, UnknownTask
from dataloader.testing import DrainTimeout, drain, run_inline, run_inline_async
from tests.support import pipelines

# -- run_inline: no database --------------------------------------------------------------------


def test_an_async_generator_runs_chunk_by_chunk_with_progress_and_logs():
    result = run_inline("test.inline_chunks", {"chunks": 3}, attempt=2, lock_key="k", queue="load")

    assert result.outcome == "succeeded" and result.succeeded
    assert result.job_status == JobStatus.succeeded and result.error is None
    assert result.progress == [{"chunk": 1}, {"chunk": 2}, {"chunk": 3}]
    assert result.last_progress == {"chunk": 3}
    assert result.chunks == 3
    assert result.messages == ["chunk 1 done", "chunk 2 done", "chunk 3 done", "closed after 3 chunks"]
    ctx = result.context
    assert (ctx.attempt, ctx.lock_key, ctx.queue, ctx.task) == (2, "k", "load", "test.inline_chunks")


def test_a_shutdown_at_the_nth_chunk_stops_the_generator_there_and_puts_the_job_back():
    result = run_inline("test.inline_chunks", {"chunks": 10}, stop_after_chunks=2)

    assert result.outcome == "stopped" and result.stop_reason == "shutdown"
    assert result.job_status == JobStatus.queued  # back to the queue, attempt not counted
    assert result.chunks == 2
    assert result.progress == [{"chunk": 1}, {"chunk": 2}]
    assert result.messages[-1] == "closed after 2 chunks"  # the generator was closed (its finally ran)


def test_a_cancel_at_the_nth_chunk_ends_the_job_canceled():
    result = run_inline(pipelines.inline_chunks, {"chunks": 10}, stop_after_chunks=1, cancel=True)

    assert (result.outcome, result.stop_reason, result.job_status) == ("stopped", "cancel", JobStatus.canceled)
    assert result.chunks == 1 and result.progress == [{"chunk": 1}]


def test_a_cancel_before_the_start_is_seen_at_the_first_chunk_boundary():
    result = run_inline("test.inline_chunks", {"chunks": 10}, cancel=True)

    assert result.job_status == JobStatus.canceled
    assert result.chunks == 1  # as in the engine: a generator stops at its next yield


def test_a_plain_function_that_sees_the_stop_and_returns_ends_as_the_stop_says():
    whole = run_inline("test.inline_sync_steps", {"steps": 5})
    assert whole.outcome == "succeeded" and [p["step"] for p in whole.progress] == [1, 2, 3, 4, 5]
    assert whole.chunks == 1

    stopped = run_inline("test.inline_sync_steps", {"steps": 5}, stop_after_progress=2, cancel=True)
    assert stopped.outcome == "stopped" and stopped.job_status == JobStatus.canceled
    assert stopped.progress == [{"step": 1}, {"step": 2}]
    assert stopped.messages == ["stopping before step 3"]

    shutdown = run_inline("test.inline_sync_steps", {"steps": 5}, stop_after_progress=2)
    assert shutdown.job_status == JobStatus.queued


def test_a_cancel_interrupts_a_plain_coroutine_at_its_next_await_but_a_shutdown_lets_it_finish():
    canceled = run_inline("test.inline_async_steps", {"steps": 5}, stop_after_progress=2, cancel=True)
    assert canceled.outcome == "stopped" and canceled.job_status == JobStatus.canceled
    assert canceled.progress == [{"step": 1}, {"step": 2}]

    # It never looks at the stop flag: when it returns, its work is done (README's rule).
    shutdown = run_inline("test.inline_async_steps", {"steps": 5}, stop_after_progress=2)
    assert shutdown.outcome == "succeeded" and len(shutdown.progress) == 5


def test_a_plain_generator_runs_in_a_thread_and_stops_at_its_yield():
    result = run_inline("test.sync_chunks", {"chunks": 4, "chunk_sec": 0}, stop_after_chunks=3)

    assert result.outcome == "stopped" and result.chunks == 3
    assert result.progress == [{"chunk": 1}, {"chunk": 2}, {"chunk": 3}]


def test_failures_follow_the_engine_rules_for_retries_and_fatal_errors():
    first = run_inline("test.flaky", {"succeed_on": 99})
    assert first.outcome == "failed" and isinstance(first.error, RuntimeError)
    assert first.job_status == JobStatus.queued and first.retry_in_sec == pytest.approx(0.2)
    assert first.context.max_attempts == 3  # the pipeline's own limit wins over the job's 5
    with pytest.raises(RuntimeError, match="attempt 1"):
        first.raise_error()

    last = run_inline("test.flaky", {"succeed_on": 99}, attempt=3)
    assert (last.outcome, last.job_status, last.retry_in_sec) == ("failed", JobStatus.failed, None)

    assert run_inline("test.flaky", {"succeed_on": 2}, attempt=2).succeeded

    fatal = run_inline("test.fatal")
    assert fatal.outcome == "fatal" and fatal.job_status == JobStatus.failed
    assert isinstance(fatal.error, FatalError)


def test_progress_the_database_could_not_store_fails_the_attempt_as_it_would_in_the_engine():
    async def reports_a_datetime(ctx: JobContext) -> None:
        await ctx.progress({"at": dt.datetime.now()})

    result = run_inline(reports_a_datetime, task="my.task", max_attempts=1)
    assert result.outcome == "failed" and isinstance(result.error, TypeError)
    assert result.job_status == JobStatus.failed and result.context.task == "my.task"


def test_unregistered_functions_unknown_names_and_builtins():
    def plain(ctx: JobContext) -> None:
        ctx.log.warning("ran with %s", ctx.args["x"])

    result = run_inline(plain, {"x": 1})
    assert result.succeeded and result.messages == ["ran with 1"]
    assert result.records[0].levelname == "WARNING"

    assert run_inline("dl.noop").succeeded
    with pytest.raises(UnknownTask, match=r"no\.such\.task"):
        run_inline("no.such.task")


async def test_the_async_flavour_runs_inside_a_test_loop_and_the_sync_one_refuses_to():
    result = await run_inline_async("test.inline_chunks", {"chunks": 2}, stop_after_chunks=1, cancel=True)
    assert result.job_status == JobStatus.canceled and result.chunks == 1

    with pytest.raises(RuntimeError, match="run_inline_async"):
        run_inline("test.inline_chunks")


# -- drain: the real engine, the test database ---------------------------------------------------


def settings_for(dsn: str) -> Settings:
    return Settings(db_dsn=dsn, workers=[Queue("q", 2)], pipeline_modules="tests.support.pipelines",
                    heartbeat_sec=0.2, poll_fallback_sec=1, shutdown_timeout_sec=2)


@pytest.fixture
async def app(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(settings_for(dsn)) as opened:
        yield opened


async def test_drain_runs_the_queue_to_the_end_retries_included_and_reports_by_status(app: App, db: asyncpg.Pool):
    noops = [await app.enqueue("dl.noop", queue="q") for _ in range(3)]
    flaky = await app.enqueue("test.flaky", {"succeed_on": 2}, queue="q")  # retried after 0.2 s
    fatal = await app.enqueue("test.fatal", queue="q")
    other = await app.enqueue("dl.noop", queue="elsewhere")

    result = await drain(app, "q", timeout=30)

    assert {j.id for j in result.succeeded} == {j.id for j in noops} | {flaky.id}
    assert [j.id for j in result.failed] == [fatal.id]
    assert result.counts() == {"succeeded": 4, "failed": 1} and result.remaining == []
    assert next(j for j in result.succeeded if j.id == flaky.id).attempt == 2
    assert (await app.get(other.id)).status == JobStatus.queued  # another queue is not touched
    assert app.served_queues() == frozenset()  # the workers were stopped
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'q' AND status IN ('queued', 'running')") == 0

    again = await drain(app, "q", timeout=5)  # jobs that finished before a drain are not its own
    assert again.finished == {} and again.jobs == []


async def test_drain_reports_jobs_created_while_it_runs(app: App, dsn: str):
    parent = await app.enqueue("test.enqueue_child", {"dsn": dsn}, queue="q")

    result = await drain(app, "q", timeout=30)

    assert [j.task for j in result.jobs] == ["test.enqueue_child", "dl.noop"]
    child = result.jobs[1]
    assert child.args == {"parent": str(parent.id)} and child.status == JobStatus.succeeded


async def test_drain_waits_for_a_job_due_within_the_timeout_and_leaves_one_due_after_it(app: App):
    soon = await app.enqueue("dl.noop", queue="q", delay=1.0)
    later = await app.enqueue("dl.noop", queue="q", delay=3600)

    started = time.monotonic()
    result = await drain(app, "q", timeout=20)

    assert [j.id for j in result.succeeded] == [soon.id]
    assert [j.id for j in result.remaining] == [later.id]
    assert (await app.get(later.id)).status == JobStatus.queued
    assert time.monotonic() - started < 15  # it did not wait for the timeout

    with pytest.raises(DrainTimeout, match="delayed past") as raised:
        await drain(app, "q", timeout=20, wait_for_delayed=True)
    assert [j.id for j in raised.value.pending] == [later.id]
    assert time.monotonic() - started < 15  # refused at once, not after the timeout


async def test_drain_gives_up_at_its_timeout_with_what_was_pending(app: App):
    slow = await app.enqueue("dl.sleep", {"seconds": 60, "chunks": 600}, queue="q")
    quick = await app.enqueue("dl.noop", queue="q")

    started = time.monotonic()
    with pytest.raises(DrainTimeout, match="still had") as raised:
        await drain(app, "q", timeout=1.5)
    elapsed = time.monotonic() - started

    assert [j.id for j in raised.value.pending] == [slow.id]
    assert [j.id for j in raised.value.result.succeeded] == [quick.id]
    assert 1.5 <= elapsed < 10
    # Leaving the drain stopped the workers gracefully: the slow job went back to the queue.
    job = await app.get(slow.id)
    assert job.status == JobStatus.queued and app.served_queues() == frozenset()


async def test_drain_of_an_empty_queue_returns_at_once(app: App):
    started = asyncio.get_running_loop().time()
    result = await drain(app, "q", timeout=30)
    assert result.jobs == [] and result.remaining == []
    assert asyncio.get_running_loop().time() - started < 10
