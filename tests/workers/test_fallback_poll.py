"""DESIGN promise 6, its backstop: a job whose NOTIFY was lost is found by the bounded fallback poll
(DL_POLL_FALLBACK_SEC), and only by it."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from prometheus_client import REGISTRY

from tests.conftest import wait_until
from tests.support.engine import job_row, running_engine

WINDOW_SEC = 5.0  # a worker polling every 1 s finds the job within it; one polling every 120 s does not


async def _insert_without_notify(db: asyncpg.Pool, queue: str) -> uuid.UUID:
    """Enqueue like insert_job.sql does (job + 'queued' row, one transaction) but with the notify
    triggers off for this transaction only (replica role skips ordinary triggers): a lost NOTIFY."""
    job_id = uuid.uuid4()
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key) VALUES ($1, $2, 'dl.noop', $3)",
                           job_id, queue, f"silent-{job_id}")
        await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind) VALUES ($1, $2, 'queued')",
                           job_id, queue)
    return job_id


def _idle(manager) -> bool:
    """Every queue worker answered all hints of work it got (its start-up claim included) and has
    nothing due: from now on only a NOTIFY, a timer or the fallback poll can make it claim."""
    return all(w._settled_generation == w._work_generation and not w._has_work_now() and not w.running
               for w in manager.workers.values())


def _polls(queue: str) -> float:
    return REGISTRY.get_sample_value("dl_worker_wakeups_total", {"queue": queue, "source": "poll"}) or 0.0


async def test_a_job_whose_notify_was_lost_is_found_by_the_fallback_poll_only(dsn, db):
    fast, slow = f"poll-1s-{uuid.uuid4().hex[:6]}", f"poll-120s-{uuid.uuid4().hex[:6]}"
    heard: list[str] = []
    listener = await asyncpg.connect(dsn)
    await listener.add_listener("dl_jobs", lambda _c, _p, _ch, payload: heard.append(payload))
    try:
        async with running_engine(dsn, db, queues={fast: 1}, run_reaper=False, poll_fallback_sec=1) as polling, \
                running_engine(dsn, db, queues={slow: 1}, run_reaper=False, poll_fallback_sec=120) as waiting:
            await wait_until(lambda: _idle(polling) and _idle(waiting), timeout=10, message="workers to go idle")
            polls_before = _polls(fast)
            found_fast = await _insert_without_notify(db, fast)
            found_slow = await _insert_without_notify(db, slow)
            # No notification was sent for them: a marker sent after them arrives alone (NOTIFYs
            # are delivered in commit order).
            marker = f"marker-{uuid.uuid4().hex[:6]}"
            await db.execute("SELECT pg_notify('dl_jobs', $1)", marker)
            await wait_until(lambda: marker in heard, timeout=5, message="the marker notification")
            assert fast not in heard and slow not in heard, f"a notification was sent: {heard}"

            loop = asyncio.get_running_loop()
            window_end = loop.time() + WINDOW_SEC
            await wait_until(lambda: _status_is(db, found_fast, "succeeded"), timeout=WINDOW_SEC,
                             message="the 1 s fallback poll to find the job")
            assert _polls(fast) > polls_before, "found, but not by a poll wake-up"
            # the same window, to its end: the worker that polls every 120 s has not found its job
            await asyncio.sleep(max(0.0, window_end - loop.time()))
            row = await job_row(db, found_slow)
            assert (row["status"], row["attempt"]) == ("queued", 0), \
                "claimed without a notification or a poll: the test does not show that the poll found it"
            # and a notification for it is heard at once
            await db.execute("SELECT pg_notify('dl_jobs', $1)", slow)
            await wait_until(lambda: _status_is(db, found_slow, "succeeded"), timeout=10)
    finally:
        await listener.close()


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status
