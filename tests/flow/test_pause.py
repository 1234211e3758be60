"""Pause and resume a queue (issue 21, docs/flow-control.md), in one node: a paused queue starts
nothing new while its running jobs finish, enqueue still works, a resume starts the backlog at
once (it wakes the workers), and the pause is a database row, so it is visible to a second App.

"The worker tried and got nothing" is observed, never assumed after a sleep: the claim histogram
of the queue (this process's metrics) must have counted claims made after the pause."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from dataloader import App, Settings
from tests.conftest import wait_until
from tests.support.engine import enqueue, running_engine


def claims(queue: str) -> float:
    return REGISTRY.get_sample_value("dl_claim_duration_seconds_count", {"queue": queue}) or 0.0


async def statuses(pool, ids: list[uuid.UUID]) -> dict[str, int]:
    rows = await pool.fetch("SELECT status::text AS s, count(*) AS n FROM dl_jobs WHERE job_id = ANY($1) GROUP BY 1",
                            ids)
    return {r["s"]: r["n"] for r in rows}


def now_in(pool, ids: list[uuid.UUID], expected: dict[str, int]):
    """A wait_until predicate: the jobs' statuses are `expected`."""
    async def check() -> bool:
        return await statuses(pool, ids) == expected
    return check


async def test_a_paused_queue_finishes_what_runs_starts_nothing_new_and_resume_starts_the_rest(dsn, db):
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        async with running_engine(dsn, db, {queue: 4}):
            first = [await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 1.0}) for _ in range(2)]
            await wait_until(now_in(db, first, {"running": 2}), message="the first two run")

            paused = await app.pause_queue(queue)
            assert paused.paused and paused.paused_at is not None
            before = claims(queue)
            # Enqueue still works (and each enqueue wakes the workers, who claim and find nothing).
            held = [await enqueue(db, "dl.noop", queue=queue) for _ in range(3)]
            assert await statuses(db, held) == {"queued": 3}

            # The running ones finish; their finish steps claim again (one commit) and get nothing.
            await wait_until(now_in(db, first, {"succeeded": 2}), message="running jobs finish")
            await wait_until(lambda: claims(queue) >= before + 2, message="claims after the pause")
            assert await statuses(db, held) == {"queued": 3}
            attempts = await db.fetch("SELECT attempt FROM dl_jobs WHERE job_id = ANY($1)", held)
            assert {r["attempt"] for r in attempts} == {0}

            listed = {q.queue: q for q in await app.queues()}
            assert listed[queue].paused and listed[queue].queued == 3 and listed[queue].running == 0

            resumed = await app.resume_queue(queue)
            assert not resumed.paused and resumed.paused_at is None
            # The resume's NOTIFY wakes the worker: no fallback poll (10 s in these settings) needed.
            await wait_until(now_in(db, held, {"succeeded": 3}), timeout=5, message="resume starts them")
    finally:
        await app.close()


async def test_a_pause_is_durable_state_every_app_sees_and_pausing_twice_keeps_its_start(dsn, db):
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    one = await App(Settings(db_dsn=dsn, workers=[])).open()
    two = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        first = await one.pause_queue(queue)
        again = await two.pause_queue(queue)
        assert again.paused_at == first.paused_at
        seen = {q.queue: q for q in await two.queues()}
        assert seen[queue].paused
        await one.resume_queue(queue)
        assert not {q.queue: q for q in await two.queues()}[queue].paused
        # A queue never paused: resume is a no-op that writes nothing.
        never = f"flow-{uuid.uuid4().hex[:8]}"
        assert not (await two.resume_queue(never)).paused
        assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", never) == 0
    finally:
        await one.close()
        await two.close()


async def test_a_paused_queue_wakes_no_worker_for_its_delayed_jobs(dsn, db):
    """next_due_in leaves a paused queue out: a worker does not set a timer for a job it may not
    claim (it would wake, claim nothing, and set the timer again)."""
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        from dataloader.storage.queue_connection import QueueConnection

        await enqueue(db, "dl.noop", queue=queue, available_at=datetime.now(UTC) + timedelta(seconds=30))
        async with db.acquire() as conn:
            nothing_due = await QueueConnection(conn).next_due_in(f"empty-{queue}")  # the answer for no job
            assert await QueueConnection(conn).next_due_in(queue) < 31
            await app.pause_queue(queue)
            assert await QueueConnection(conn).next_due_in(queue) == nothing_due
            await app.resume_queue(queue)
            assert await QueueConnection(conn).next_due_in(queue) < 31
    finally:
        await app.close()


def _idle(manager) -> bool:
    """Every queue worker answered all hints of work and has nothing due (as in test_fallback_poll)."""
    return all(w._settled_generation == w._work_generation and not w._has_work_now() and not w.running
               for w in manager.workers.values())


async def test_a_paused_queue_with_a_backlog_leaves_its_worker_idle(dsn, db):
    """Promise 6 while paused: runnable and delayed jobs of a paused queue do not make its worker
    claim again and again; it goes idle and makes no claim through a window that contains the delayed
    job's due time (the fallback poll is 10 s in these settings)."""
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await app.pause_queue(queue)
        runnable = [await enqueue(db, "dl.noop", queue=queue) for _ in range(3)]
        delayed = await enqueue(db, "dl.noop", queue=queue, available_at=datetime.now(UTC) + timedelta(seconds=1.5))
        async with running_engine(dsn, db, {queue: 2}, run_reaper=False) as manager:
            await wait_until(lambda: _idle(manager), timeout=10, message="the worker to go idle")
            before = claims(queue)
            # a measuring window past the delayed job's due time, not a wait for an event
            await asyncio.sleep(3.0)
            assert claims(queue) == before
            assert await statuses(db, [*runnable, delayed]) == {"queued": 4}
            await app.resume_queue(queue)
            await wait_until(now_in(db, [*runnable, delayed], {"succeeded": 4}), timeout=5, message="resumed")
    finally:
        await app.close()
