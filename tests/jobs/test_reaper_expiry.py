"""A lease is taken back only after it expired (promise 3's other side): a reaper tick that runs
while a job's lease still has half a second left takes nothing, and the same tick takes a lease
that ended half a second ago. With the reaper's condition loosened by a second
(`lease_expires_at < now() + interval '1 second'` in reap_expired.sql) this fails. A job without a
lease (a row the engine never wrote) counts from its last sign of life the same way."""

from __future__ import annotations

import uuid

import asyncpg

from dataloader.jobs.reaper import Reaper
from dataloader.storage.queue_connection import QueueConnection
from dataloader.storage.repositories import JobRepository
from tests.support.engine import enqueue


async def test_a_reaper_tick_takes_only_leases_that_ended(db, dsn):
    queue = f"reap-{uuid.uuid4().hex[:8]}"
    ids = [await enqueue(db, "dl.noop", queue=queue) for _ in range(4)]
    conn = await asyncpg.connect(dsn)
    try:
        batch = await QueueConnection(conn).claim(queue, "node", 4)
        assert sorted(c.job_id for c in batch.claimed) == sorted(ids)
        live, ended, live_unleased, ended_unleased = ids
        await db.execute("UPDATE dl_jobs SET lease_expires_at = now() + interval '0.5 s' WHERE job_id = $1", live)
        await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '0.5 s' WHERE job_id = $1", ended)
        # no lease: the row's last sign of life plus its lease_ttl_sec (60 s) decides
        await db.execute("UPDATE dl_jobs SET lease_expires_at = NULL, heartbeat_at = now() - interval '59.5 s' "
                         "WHERE job_id = $1", live_unleased)
        await db.execute("UPDATE dl_jobs SET lease_expires_at = NULL, heartbeat_at = now() - interval '60.5 s' "
                         "WHERE job_id = $1", ended_unleased)
        assert await Reaper(JobRepository(db), period=1).tick() == 2
        rows = {r["job_id"]: (r["status"], r["attempt"]) for r in await db.fetch(
            "SELECT job_id, status::text AS status, attempt FROM dl_jobs WHERE job_id = ANY($1)", ids)}
        assert rows[live] == ("running", 1), "a lease with 0.5 s left was taken back"
        assert rows[live_unleased] == ("running", 1), "a job heard from within its lease was taken back"
        assert rows[ended] == ("queued", 1) and rows[ended_unleased] == ("queued", 1)
    finally:
        await conn.close()
