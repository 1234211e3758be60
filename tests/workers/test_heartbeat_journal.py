"""Heartbeats keep the lease on every beat but journal at most hourly per attempt (0015): an
attempt's first heartbeat, then one per hour, so a long job no longer writes 360 rows an hour."""

from __future__ import annotations

from dataloader.storage.queue_connection import QueueConnection
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, running_engine


async def _heartbeats(db, job_id) -> int:
    return await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='heartbeat'", job_id)


async def test_the_first_beat_of_each_attempt_is_journaled_then_one_an_hour(db):
    job_id = await enqueue(db, "dl.noop")
    conn = await db.acquire()
    try:
        queue = QueueConnection(conn)
        job = await queue.claim_one("default", "w")
        beats = []
        for _ in range(20):
            before = (await job_row(db, job_id))["lease_expires_at"]
            assert await queue.heartbeat([(job_id, job.attempt)]) == {job_id: False}
            beats.append((await job_row(db, job_id))["lease_expires_at"] > before)
        assert all(beats), "every beat extends the lease"
        assert await _heartbeats(db, job_id) == 1
        # an hour later (as the row sees it): the next beat is journaled again
        await db.execute("UPDATE dl_jobs SET heartbeat_journaled_at = now() - interval '61 minutes' "
                         "WHERE job_id = $1", job_id)
        await queue.heartbeat([(job_id, job.attempt)])
        await queue.heartbeat([(job_id, job.attempt)])
        assert await _heartbeats(db, job_id) == 2
        # a new attempt journals its own first beat
        await db.execute("UPDATE dl_jobs SET status = 'queued' WHERE job_id = $1", job_id)
        await conn.execute("SELECT pg_advisory_unlock_all()")
        again = await queue.claim_one("default", "w")
        assert again.attempt == job.attempt + 1
        await queue.heartbeat([(job_id, again.attempt)])
        payloads = await db.fetch("SELECT payload FROM dl_job_events WHERE job_id=$1 AND kind='heartbeat' "
                                  "ORDER BY event_id", job_id)
        assert [p["payload"]["attempt"] for p in payloads] == [1, 1, 2]
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await db.release(conn)


async def test_a_running_job_beating_every_50_ms_journals_one_heartbeat(dsn, db):
    async with running_engine(dsn, db, heartbeat_sec=0.05):
        job_id = await enqueue(db, "dl.sleep", args={"seconds": 1.0, "chunks": 10})
        await wait_until(lambda: _done(db, job_id), timeout=15)
    row = await job_row(db, job_id)
    assert row["heartbeat_at"] > row["started_at"]
    assert await _heartbeats(db, job_id) == 1


async def _done(db, job_id):
    return (await job_row(db, job_id))["status"] == "succeeded"
