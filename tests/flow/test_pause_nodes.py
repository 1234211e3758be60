"""A pause holds on every node and across a node's restart (issue 21): real `dataloader worker`
processes, a pause written by another process (this test's App).

"The nodes tried and started nothing" is observed, not assumed after a sleep: the workers poll every
0.5 s (DL_POLL_FALLBACK_SEC) and every claim statement calls dl_claim_fence once (migration 0029),
and nothing else does, so the test counts the claims themselves (pg_stat_user_functions, with
track_functions = 'pl' set on this database for the nodes' sessions) and waits until the nodes made
many more than before; only then it checks that the jobs are still queued with no attempt used. (An
index's scans, which this test counted before, are made by other statements too: the pause's
listing and next_due_in.sql read dl_queue_flow's primary key as well.)"""

from __future__ import annotations

import uuid

import asyncpg

from dataloader import App, Settings
from tests.conftest import wait_until
from tests.support.engine import enqueue


async def claims_made(pool: asyncpg.Pool) -> int:
    """Claim statements run by every session of this database whose statistics were reported."""
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return await conn.fetchval(
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'dl_claim_fence'")


async def wait_for_claims(pool: asyncpg.Pool, more_than: int) -> None:
    # Statistics reach pg_stat_* when a backend goes idle, at least 1 s apart and within 10 s.
    async def enough() -> bool:
        return await claims_made(pool) > more_than
    await wait_until(enough, timeout=40, interval=0.25, message="claims of the paused queue")


async def still_held(pool: asyncpg.Pool, ids: list[uuid.UUID]) -> None:
    rows = await pool.fetch("SELECT status::text AS status, attempt FROM dl_jobs WHERE job_id = ANY($1)", ids)
    assert sorted((r["status"], r["attempt"]) for r in rows) == [("queued", 0)] * len(ids)


async def test_a_pause_holds_on_a_second_node_and_across_a_restart(dsn, db, workers, counted_claims):
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    node_settings = {"queues": {queue: 2}, "poll_fallback_sec": 0.5}
    first = workers(**node_settings)
    await first.wait_ready()
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await app.pause_queue(queue)
        held = [await enqueue(db, "dl.noop", queue=queue) for _ in range(3)]

        second = workers(**node_settings)  # a node that starts while the queue is paused
        await second.wait_ready()
        await wait_for_claims(db, await claims_made(db) + 8)
        await still_held(db, held)

        first.signal(15)  # a restart of the first node: its new process reads nothing from memory
        assert await first.wait_exit() == 0
        restarted = workers(**node_settings)
        await restarted.wait_ready()
        await wait_for_claims(db, await claims_made(db) + 8)
        await still_held(db, held)

        await app.resume_queue(queue)

        async def all_done() -> bool:
            return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                                     held) == len(held)
        await wait_until(all_done, timeout=10, message="the resumed queue's jobs run")
    finally:
        await app.close()
