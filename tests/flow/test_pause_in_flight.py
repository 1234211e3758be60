"""A pause while claims are in flight (promise 12: paused means nothing new starts), driven step by
step at the SQL level: claim A runs in a transaction held open before its commit, the pause is
called, claim B starts while the pause waits; then A commits. Nothing may start after the pause
returned: the running jobs read just after it returned are all there ever are, and B (whose commit
the test holds until after the pause returned) takes nothing.

Every claim statement takes the queue's claim fence in share mode (dl_claim_fence, migration 0029)
and the pause takes it exclusively, so a pause waits for the claims already in flight and a claim
that comes after it sees the pause. Without the fence, A's start commits after the pause returned
(plain and fair queues), and a limited queue's B, whose snapshot predates the pause, waits for the
flow row behind the pause and then starts a job: each test below fails so."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from dataloader import App
from dataloader.storage.queue_connection import ClaimBatch, QueueConnection
from tests.conftest import wait_until
from tests.support.engine import enqueue


async def waiting_on_locks(db: asyncpg.Pool) -> int:
    return await db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND wait_event_type = 'Lock'")


async def running(db: asyncpg.Pool, queue: str) -> set[uuid.UUID]:
    return {r["job_id"] for r in await db.fetch("SELECT job_id FROM dl_jobs WHERE queue = $1 AND status = 'running'",
                                                queue)}


async def pause_during_claims(app: App, db: asyncpg.Pool, conns: list[asyncpg.Connection], queue: str, *,
                              task: str | None = None, limited: bool = False, fair: bool = False) -> None:
    a, b = conns
    claim = {"limited": limited, "fair": fair}
    tx_a, tx_b = a.transaction(), b.transaction()
    await tx_a.start()
    first = await QueueConnection(a).claim(queue, "node-a", 1, **claim)
    assert len(first.claimed) == 1, "A must claim a job to hold"
    before = await waiting_on_locks(db)
    pause = asyncio.create_task(app.pause_queue(queue, task=task))
    await wait_until(_more(db, before, pause), timeout=10, message="the pause to wait or return")
    await tx_b.start()
    before = await waiting_on_locks(db)
    other: asyncio.Task[ClaimBatch] = asyncio.create_task(QueueConnection(b).claim(queue, "node-b", 4, **claim))
    await wait_until(_more(db, before, other), timeout=10, message="claim B to wait or finish")
    if pause.done():  # the pause returned while A's claim was in flight
        after_pause = await running(db, queue)
        await tx_a.commit()
    else:
        await tx_a.commit()
        await asyncio.wait_for(pause, 10)
        after_pause = await running(db, queue)
    second = await asyncio.wait_for(other, 10)
    await tx_b.commit()  # B's start, if any, commits after the pause returned
    assert second.claimed == [], "a claim in flight during the pause started a job after it returned"
    assert await running(db, queue) == after_pause, "a job started after the pause returned"


def _more(db: asyncpg.Pool, before: int, task: asyncio.Task):
    async def check() -> bool:
        return task.done() or await waiting_on_locks(db) > before
    return check


async def _jobs(db: asyncpg.Pool, queue: str, n: int = 4, **fields) -> None:
    for _ in range(n):
        await enqueue(db, "test.recorded_sleep", queue=queue, **fields)


def _queue() -> str:
    return f"pf-{uuid.uuid4().hex[:8]}"


async def test_a_pause_waits_for_a_plain_claim_in_flight(app: App, db, conns):
    queue = _queue()
    await _jobs(db, queue)
    await pause_during_claims(app, db, conns, queue)


async def test_a_pause_waits_for_a_limited_claim_in_flight(app: App, db, conns):
    queue = _queue()
    await app.configure_queue(queue, concurrency=10)
    await _jobs(db, queue)
    await pause_during_claims(app, db, conns, queue, limited=True)


async def test_a_pause_waits_for_a_fair_claim_in_flight(app: App, db, conns):
    queue = _queue()
    await app.configure_queue(queue, fair_share=True)
    for key in ("a", "b"):
        await _jobs(db, queue, 2, partition_key=key)
    await pause_during_claims(app, db, conns, queue, fair=True)


async def test_a_task_pause_waits_for_a_claim_in_flight(app: App, db, conns):
    queue = _queue()
    await _jobs(db, queue)
    await pause_during_claims(app, db, conns, queue, task="test.recorded_sleep")
