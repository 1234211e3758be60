import asyncio
import datetime as dt
import itertools

from dataloader.storage.queue_connection import QueueConnection
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, running_engine


async def _claim(pool, queue="default"):
    conn = await pool.acquire()
    try:
        job = await QueueConnection(conn).claim_one(queue, "test")
        if job is not None and job.locked:
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", job.lock_key)
        return job
    finally:
        await pool.release(conn)


async def test_claim_takes_lowest_priority_then_oldest(db):
    late_low = await enqueue(db, priority=50)
    high = await enqueue(db, priority=200)
    first_mid = await enqueue(db, priority=100)
    second_mid = await enqueue(db, priority=100)
    order = [(await _claim(db)).job_id for _ in range(4)]
    assert order == [late_low, first_mid, second_mid, high]
    assert await _claim(db) is None


async def test_within_a_priority_jobs_run_in_the_order_they_became_runnable(db):
    old_but_due_later = await enqueue(db)
    await db.execute("UPDATE dl_jobs SET available_at = now() - interval '1 second' WHERE job_id=$1",
                     old_but_due_later)
    await db.execute("UPDATE dl_jobs SET created_at = now() - interval '1 hour' WHERE job_id=$1",
                     old_but_due_later)
    runnable_longer = await enqueue(db)
    await db.execute("UPDATE dl_jobs SET available_at = now() - interval '1 minute' WHERE job_id=$1",
                     runnable_longer)
    assert [(await _claim(db)).job_id for _ in range(2)] == [runnable_longer, old_but_due_later]


async def test_claim_ignores_other_queues_and_future_jobs(db):
    await enqueue(db, queue="other")
    await enqueue(db, available_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert await _claim(db) is None


async def test_claim_marks_running_and_journals_pick(db):
    job_id = await enqueue(db)
    job = await _claim(db)
    assert job.job_id == job_id and job.attempt == 1 and job.locked
    row = await job_row(db, job_id)
    assert row["status"] == "running" and row["lease_expires_at"] is not None
    assert await event_kinds(db, job_id) == ["queued", "picked"]


async def test_claim_skips_jobs_whose_lock_key_is_running(db):
    first = await enqueue(db, lock_key="k")
    await enqueue(db, lock_key="k")
    assert (await _claim(db)).job_id == first
    assert await _claim(db) is None  # the second waits; it is not claimed and backed off


async def test_delayed_job_starts_on_time_and_not_before(dsn, db):
    # The fallback poll is 60 s: a start within 30 s of available_at can only be the due-time timer.
    async with running_engine(dsn, db, poll_fallback_sec=60):
        available_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
        job_id = await enqueue(db, available_at=available_at)
        row = await wait_until(lambda: _succeeded(db, job_id), timeout=30)
    assert row["started_at"] >= available_at
    late = (row["started_at"] - available_at).total_seconds()
    assert late < 30, f"started {late:.3f}s after available_at: the timer did not wake the worker"


async def _succeeded(db, job_id):
    row = await job_row(db, job_id)
    return row if row["status"] == "succeeded" else None


async def test_lock_busy_job_backs_off_without_burning_an_attempt(dsn, db):
    # Someone (e.g. a fenced-off worker whose pipeline is still running) holds the key's lock.
    holder = await db.acquire()
    await holder.execute("SELECT pg_advisory_lock(hashtext('busy'))")
    try:
        async with running_engine(dsn, db, claim_backoff_sec=0.5):
            job_id = await enqueue(db, lock_key="busy")
            await wait_until(lambda: _has_event(db, job_id, "requeue"), timeout=5)
            row = await job_row(db, job_id)
            assert row["status"] == "queued" and row["attempt"] == 0
            payload = await db.fetchval("SELECT payload FROM dl_job_events WHERE job_id=$1 AND kind='requeue' "
                                        "ORDER BY event_id LIMIT 1", job_id)
            assert payload["reason"] == "lock_busy"
            await holder.execute("SELECT pg_advisory_unlock(hashtext('busy'))")
            row = await wait_until(lambda: _succeeded(db, job_id), timeout=5)
            assert row["attempt"] == 1
    finally:
        await db.release(holder)


async def test_a_stray_holder_is_looked_at_again_soon_then_ever_less_often(dsn, db):
    """The first sighting of a stray is often a lock about to be released (another node's
    ctx.transaction() just committed): the job is held back 0.2 s, then 0.8, 3.2 … up to
    DL_CLAIM_BACKOFF_SEC, never hammering the claim while a real stray holds on."""
    holder = await db.acquire()
    await holder.execute("SELECT pg_advisory_lock(hashtext('stray'))")
    try:
        async with running_engine(dsn, db, claim_backoff_sec=60):
            job_id = await enqueue(db, lock_key="stray")
            await wait_until(lambda: _requeues(db, job_id, 3), timeout=10)
            rows = await db.fetch("SELECT ts, payload FROM dl_job_events WHERE job_id=$1 AND kind='requeue' "
                                  "ORDER BY event_id", job_id)
            holds = [(dt.datetime.fromisoformat(r["payload"]["available_at"]) - r["ts"]).total_seconds()
                     for r in rows[:3]]
            assert [round(h, 1) for h in holds] == [0.2, 0.8, 3.2]
            await holder.execute("SELECT pg_advisory_unlock(hashtext('stray'))")
            assert (await wait_until(lambda: _succeeded(db, job_id), timeout=10))["attempt"] == 1
    finally:
        await db.release(holder)


async def _requeues(db, job_id, count):
    return await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue'", job_id) >= count


async def _has_event(db, job_id, kind):
    return kind in await event_kinds(db, job_id)


async def test_same_lock_key_in_one_process_runs_one_at_a_time_and_hands_off_on_finish(dsn, db):
    # fallback poll 60 s, claim backoff 15 s: a hand-off within 10 s is the holder's finish waking
    # the waiters (how fast exactly is measured in bench/)
    async with running_engine(dsn, db, queues={"default": 4}, poll_fallback_sec=60):
        ids = [await enqueue(db, "test.recorded_sleep", lock_key="serial",
                             args={"dsn": dsn, "seconds": 0.2, "chunks": 2}) for _ in range(4)]
        for job_id in ids:
            await wait_until(lambda j=job_id: _succeeded(db, j), timeout=15)
    runs = await db.fetch("SELECT started_at, ended_at FROM test_runs ORDER BY started_at")
    assert len(runs) == 4
    for prev, nxt in itertools.pairwise(runs):
        assert nxt["started_at"] >= prev["ended_at"], "two jobs with one lock_key overlapped"
        assert (nxt["started_at"] - prev["ended_at"]).total_seconds() < 10


async def test_waiter_on_another_queue_is_woken_when_the_key_frees(dsn, db):
    # fallback poll 60 s: starting within 10 s of the holder's finish means the finish woke queue b
    async with running_engine(dsn, db, queues={"a": 1, "b": 1}, poll_fallback_sec=60):
        first = await enqueue(db, "dl.sleep", queue="a", lock_key="shared", args={"seconds": 0.5, "chunks": 2})
        await wait_until(lambda: _status_is(db, first, "running"))
        second = await enqueue(db, "dl.noop", queue="b", lock_key="shared")
        row1 = await wait_until(lambda: _succeeded(db, first), timeout=10)
        row2 = await wait_until(lambda: _succeeded(db, second), timeout=10)
    assert row2["started_at"] >= row1["finished_at"]
    assert (row2["started_at"] - row1["finished_at"]).total_seconds() < 10


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


async def test_many_jobs_fan_out_over_slots(dsn, db):
    # Enqueued before the engine starts, so its first claim sees all 8. Parallel means the run
    # intervals overlap: 4 at once at some point (the slots), never more.
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 1.0, "chunks": 2})
           for _ in range(8)]
    async with running_engine(dsn, db, queues={"default": 4}):
        for job_id in ids:
            await wait_until(lambda j=job_id: _succeeded(db, j), timeout=30)
    runs = await db.fetch("SELECT started_at, ended_at FROM test_runs")
    assert len(runs) == 8
    # the most runs in progress at once: at each start, count the runs that started and did not end
    at_once = max(sum(1 for r in runs if r["started_at"] <= s["started_at"] < r["ended_at"]) for s in runs)
    assert at_once == 4, f"{at_once} jobs ran at once on 4 slots"


async def test_lock_race_with_an_uncommitted_claim_is_seen_as_a_running_holder(db):
    """The claim takes the advisory lock inside its statement, before its commit. A loser of that
    race must wait for the commit and see a running holder (re-queue at once), not a stray lock
    (which would earn it the full 15 s backoff)."""
    holder_job = await enqueue(db, lock_key="race")
    loser_job = await enqueue(db, lock_key="race")
    holder = await db.acquire()
    loser = await db.acquire()
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("UPDATE dl_jobs SET status='running', attempt=1 WHERE job_id=$1", holder_job)
        await holder.execute("SELECT pg_advisory_lock(hashtext('race'))")
        pending = asyncio.ensure_future(QueueConnection(loser).lock_holders(loser_job, "race"))
        loser_pid = loser.get_server_pid()
        await wait_until(lambda: db.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid=$1", loser_pid), timeout=5)
        assert not pending.done()
        await tx.commit()
        running_holders, locked_now = await asyncio.wait_for(pending, 5)
        assert (running_holders, locked_now) == (1, False)
    finally:
        await holder.execute("SELECT pg_advisory_unlock_all()")
        await db.release(holder)
        await db.release(loser)
