"""A claim whose snapshot predates another session's claim of the same lock_key, where that session
committed its job as running and then died (its advisory lock released with it), must not start a
second job of the key (promise 2; migration 0044, dl_take_key). Driven step by step at the SQL level:
the claim is held in its claim fence (the lock a pause takes, here held by the test) after its
statement's snapshot was taken; meanwhile a holder takes the key's lock, commits its job as running
and closes its session; then the fence is let go. The claim's walk still sees the key free in its old
snapshot, and gets the lock: only the check after the lock sees the running holder.
tests/workers/test_session_kills.py met this under its session churn, two runs of one key overlapping."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from dataloader import App
from dataloader.storage.queue_connection import QueueConnection
from tests.conftest import wait_until
from tests.support.engine import enqueue

# the claim fence's class (migration 0029), whose exclusive hold makes every claim of a queue wait
FENCE_CLASS = 0x444C4650


async def _waiting_on_locks(db: asyncpg.Pool, pid: int) -> bool:
    return await db.fetchval("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid)


async def _key_locked(db: asyncpg.Pool, key: str) -> bool:
    return await db.fetchval("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 "
                             "AND objid = (hashtext($1)::bigint & 4294967295)::oid AND granted)", key)


@pytest.mark.parametrize("kind", ["plain", "limited", "fair"])
async def test_a_claim_whose_snapshot_predates_a_dead_holder_of_its_key_takes_nothing(app: App, db, dsn, kind):
    queue, key = f"kr-{uuid.uuid4().hex[:8]}", f"key-{uuid.uuid4().hex[:8]}"
    if kind == "limited":
        await app.configure_queue(queue, concurrency=10)
    elif kind == "fair":
        await app.configure_queue(queue, fair_share=True)
    held = await enqueue(db, "test.recorded_sleep", queue=queue, lock_key=key)
    waiting = await enqueue(db, "test.recorded_sleep", queue=queue, lock_key=key)

    fence, claimer, holder = [await asyncpg.connect(dsn) for _ in range(3)]
    try:
        fence_tx = fence.transaction()
        await fence_tx.start()
        await fence.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", FENCE_CLASS, queue)
        claim = asyncio.create_task(QueueConnection(claimer).claim(queue, "node-b", 4, limited=kind == "limited",
                                                                   fair=kind == "fair"))
        await wait_until(lambda: _waiting_on_locks(db, claimer.get_server_pid()), timeout=10,
                         message="the claim to wait in its fence, its snapshot taken")

        # another node's claim of the key, as claim_take.sql does it: the lock, the row running, commit
        await holder.execute("SELECT pg_advisory_lock(hashtext($1))", key)
        await holder.execute("UPDATE dl_jobs SET status = 'running', attempt = attempt + 1, "
                             "lease_expires_at = now() + interval '1 minute' WHERE job_id = $1", held)
        await holder.close()  # its session ends: the key's advisory lock goes with it, the row stays running
        await wait_until(lambda: _no(_key_locked(db, key)), timeout=10, message="the holder's lock to be released")

        await fence_tx.commit()
        batch = await asyncio.wait_for(claim, 10)
        assert [j.job_id for j in batch.claimed] == [], "a second job of a running lock_key was started"
        status = await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", waiting)
        assert status == "queued"
        assert not await _key_locked(db, key), "the refused claim kept the key's advisory lock"
    finally:
        for conn in (fence, claimer, holder):
            if not conn.is_closed():
                await conn.close()


async def _no(check) -> bool:
    return not await check
