"""An attempt without a task of its own (`Attempt.start`, issue 25): its pipeline runs in its task
as before (current_task, asyncio.timeout, its context), and the rest is callbacks: the outcome is
decided in the task's done callback and the finish is answered by a callback, not a future; the
run-time limit is a timer, and a cancel still reaches the pipeline."""

from __future__ import annotations

import asyncio
import contextvars

from dataloader import JobContext, pipeline
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, job_service, running_engine

_SEEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("attempt_seen", default=None)


@pipeline("test.attempt_suspends")
async def suspends(ctx: JobContext) -> dict[str, object]:
    """Sets a context variable before its first await and reads it after two more; needs a task
    (asyncio.timeout refuses to run outside one)."""
    _SEEN.set(ctx.args["mark"])
    before = asyncio.current_task()
    async with asyncio.timeout(10):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0)
    return {"seen": _SEEN.get(), "in_a_task": asyncio.current_task() is not None,
            "same_task": asyncio.current_task() is before}


@pipeline("test.attempt_sleeps_long")
async def blocks_then_sleeps(ctx: JobContext) -> None:
    await asyncio.sleep(30)


async def _finished(db, job_id):
    row = await job_row(db, job_id)
    return row if row["status"] in ("succeeded", "failed", "canceled") else None


async def test_short_jobs_run_without_an_attempt_task_each(dsn, db):
    created: list[str] = []
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()

    def counting_factory(loop, coro, **kwargs):
        created.append(getattr(coro, "__qualname__", ""))
        return factory(loop, coro, **kwargs) if factory else asyncio.Task(coro, loop=loop, **kwargs)

    async with running_engine(dsn, db, queues={"default": 8}):
        loop.set_task_factory(counting_factory)
        try:
            ids = [await enqueue(db, "dl.noop", lock_key=f"k{i}") for i in range(40)]
            for job_id in ids:
                await wait_until(lambda job_id=job_id: _finished(db, job_id), timeout=15)
        finally:
            loop.set_task_factory(factory)
    assert [(await job_row(db, j))["status"] for j in ids] == ["succeeded"] * 40
    assert not [name for name in created if "_run_attempt" in name], created
    assert len([name for name in created if "_run_pipeline" in name]) == 40
    kinds = await db.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", ids[0])
    assert [r["kind"] for r in kinds] == ["queued", "picked", "done"]


async def test_a_pipeline_runs_in_its_own_task_and_context(dsn, db):
    async with running_engine(dsn, db, queues={"default": 4}):
        ids = [await enqueue(db, "test.attempt_suspends", args={"mark": f"m{i}"}) for i in range(6)]
        rows = [await wait_until(lambda job_id=job_id: _finished(db, job_id), timeout=15) for job_id in ids]
    assert [(r["status"], r["result"]) for r in rows] == [
        ("succeeded", {"seen": f"m{i}", "in_a_task": True, "same_task": True}) for i in range(6)]
    assert _SEEN.get() is None  # the worker's own context never saw the pipeline's variable


async def test_the_run_time_limit_stops_a_pipeline_started_without_an_attempt_task(dsn, db):
    async with running_engine(dsn, db, queues={"default": 2}):
        job_id = await enqueue(db, "test.attempt_sleeps_long", max_attempts=1, timeout_sec=1)
        row = await wait_until(lambda: _finished(db, job_id), timeout=20)
    assert row["status"] == "failed"
    assert "timeout" in (row["error"] or "").lower() or "time limit" in (row["error"] or "").lower(), row["error"]
    assert 1.0 <= (row["finished_at"] - row["started_at"]).total_seconds() < 10


async def test_a_cancel_reaches_a_pipeline_started_without_an_attempt_task(dsn, db):
    async with running_engine(dsn, db, queues={"default": 2}, heartbeat_sec=0.2):
        job_id = await enqueue(db, "test.attempt_sleeps_long")
        await wait_until(lambda: db.fetchval("SELECT status = 'running' FROM dl_jobs WHERE job_id = $1", job_id),
                         timeout=15)
        await job_service(db).cancel(job_id)
        row = await wait_until(lambda: _finished(db, job_id), timeout=15)
    assert row["status"] == "canceled"
