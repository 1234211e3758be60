import asyncio

from dataloader.storage.repositories import FinishRequest, JobRepository, QueueConnection
from dataloader.workers.reaper import Reaper
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, running_engine


async def _expire(db, job_id):
    await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id=$1", job_id)


async def test_reaper_returns_an_expired_lease_to_the_queue(db):
    job_id = await enqueue(db)
    conn = await db.acquire()
    try:
        job = await QueueConnection(conn).claim_one("default", "crashed-worker")
        await _expire(db, job_id)
        reaped = await Reaper(JobRepository(db), period=1).tick()
        assert reaped == 1
        row = await job_row(db, job_id)
        assert (row["status"], row["attempt"], row["lease_expires_at"]) == ("queued", 1, None)
        assert "lease expired" in row["error"]
        assert await event_kinds(db, job_id) == ["queued", "picked", "requeue"]
        # the crashed worker's late writes are refused (fenced) and change nothing
        assert await QueueConnection(conn).heartbeat([(job_id, job.attempt)]) == {}
        assert await JobRepository(db).set_progress(job_id, job.attempt, {"x": 1}) is None
        result = await QueueConnection(conn).finish_one(FinishRequest(
            job_id, job.attempt, "succeeded", lock_key=job.lock_key, unlock=True))
        assert result.status is None
        row = await job_row(db, job_id)
        assert row["status"] == "queued" and row["progress"] == {}
        assert await event_kinds(db, job_id) == ["queued", "picked", "requeue"]
    finally:
        await db.release(conn)


async def test_late_finish_of_an_old_attempt_is_refused_after_reclaim(db):
    job_id = await enqueue(db)
    old = await db.acquire()
    new = await db.acquire()
    try:
        stale = await QueueConnection(old).claim_one("default", "old")
        await old.execute("SELECT pg_advisory_unlock(hashtext($1))", stale.lock_key)  # it died
        await _expire(db, job_id)
        await Reaper(JobRepository(db), period=1).tick()
        fresh = await QueueConnection(new).claim_one("default", "new")
        assert fresh.job_id == job_id and fresh.attempt == 2
        refused = await QueueConnection(old).finish_one(FinishRequest(
            job_id, stale.attempt, "error", error="late", lock_key=stale.lock_key, unlock=False))
        assert refused.status is None
        assert (await job_row(db, job_id))["status"] == "running"
        done = await QueueConnection(new).finish_one(FinishRequest(
            job_id, fresh.attempt, "succeeded", lock_key=fresh.lock_key, unlock=True))
        assert done.status == "succeeded"
    finally:
        await db.release(old)
        await db.release(new)


async def test_reaper_marks_lost_when_no_attempt_is_left(db):
    job_id = await enqueue(db, max_attempts=1)
    conn = await db.acquire()
    try:
        await QueueConnection(conn).claim_one("default", "crashed-worker")
        await _expire(db, job_id)
        await Reaper(JobRepository(db), period=1).tick()
    finally:
        await db.release(conn)
    row = await job_row(db, job_id)
    assert row["status"] == "lost" and row["finished_at"] is not None
    assert (await event_kinds(db, job_id))[-1] == "lost"


async def test_concurrent_reapers_take_each_job_back_once(db):
    ids = [await enqueue(db) for _ in range(300)]
    await db.execute("UPDATE dl_jobs SET status='running', attempt=1, lease_expires_at=now() - interval '1 s'")
    reapers = [Reaper(JobRepository(db), period=1, batch_size=50) for _ in range(4)]
    counts = await asyncio.gather(*(r.tick() for r in reapers))
    assert sum(counts) == len(ids)
    per_job = await db.fetch("SELECT job_id, count(*) AS n FROM dl_job_events WHERE kind='requeue' GROUP BY job_id")
    assert len(per_job) == len(ids) and {r["n"] for r in per_job} == {1}


async def test_worker_whose_lease_was_taken_stops_its_pipeline(dsn, db):
    async with running_engine(dsn, db, heartbeat_sec=0.1, run_reaper=False):
        job_id = await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 30, "chunks": 300})
        await wait_until(lambda: _run_count(db), timeout=10)
        # The reaper of another node decides this worker is gone and re-queues the job.
        await db.execute("UPDATE dl_jobs SET status='queued', lease_expires_at=NULL, available_at=now() + "
                         "interval '1 hour' WHERE job_id=$1", job_id)
        await wait_until(lambda: _log_pipeline_stopped(db, job_id), timeout=5)
    first_run = await db.fetchrow("SELECT * FROM test_runs WHERE job_id=$1 AND attempt=1", job_id)
    assert first_run["ended_at"] is None  # it stopped mid-way, did not run to completion
    row = await job_row(db, job_id)
    assert row["status"] == "queued"  # its finish was refused: the queue's view stands


async def _run_count(db):
    return await db.fetchval("SELECT count(*) FROM test_runs")


async def _log_pipeline_stopped(db, job_id):
    # The stopped attempt frees its advisory lock; take it to prove nobody holds it anymore.
    conn = await db.acquire()
    try:
        got = await conn.fetchval("SELECT pg_try_advisory_lock(hashtext(lock_key)) FROM dl_jobs WHERE job_id=$1",
                                  job_id)
        if got:
            await conn.execute("SELECT pg_advisory_unlock(hashtext(lock_key)) FROM dl_jobs WHERE job_id=$1", job_id)
        return got
    finally:
        await db.release(conn)


async def test_reaper_cancels_an_expired_job_whose_cancel_was_requested(db):
    job_id = await enqueue(db)
    conn = await db.acquire()
    try:
        await QueueConnection(conn).claim_one("default", "crashed-worker")
        await db.execute("UPDATE dl_jobs SET cancel_requested = true WHERE job_id=$1", job_id)
        await _expire(db, job_id)
        await Reaper(JobRepository(db), period=1).tick()
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await db.release(conn)
    row = await job_row(db, job_id)
    assert row["status"] == "canceled" and row["finished_at"] is not None
    assert (await event_kinds(db, job_id))[-1] == "canceled"


async def test_a_fenced_off_attempt_still_running_keeps_its_key_from_the_next_attempt(dsn, db):
    """The reaper (of another node) took the job back while this node's pipeline is still inside a
    long chunk. The same worker claims the job again at once; its session already holds the key,
    so it must notice the re-entrant lock and back off instead of running the job twice at once."""
    async with running_engine(dsn, db, heartbeat_sec=0.1, run_reaper=False, claim_backoff_sec=0.3):
        job_id = await enqueue(db, "test.recorded_chunks", args={"dsn": dsn, "chunks": 1, "chunk_sec": 1.5})
        await wait_until(lambda: _run_count(db), timeout=10)
        await db.execute("UPDATE dl_jobs SET status='queued', lease_expires_at=NULL, available_at=now() "
                         "WHERE job_id=$1", job_id)
        await wait_until(lambda: db.fetchval("SELECT count(*) = 2 AND bool_and(ended_at IS NOT NULL) "
                                             "FROM test_runs"), timeout=15)
    runs = await db.fetch("SELECT attempt, started_at, ended_at FROM test_runs ORDER BY started_at")
    assert [r["attempt"] for r in runs] == [1, 2]
    assert runs[1]["started_at"] >= runs[0]["ended_at"], "the next attempt overlapped the fenced-off one"
    busy = await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue' "
                             "AND payload->>'reason' = 'lock_busy'", job_id)
    assert busy >= 1
